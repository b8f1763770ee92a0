"""`optictx serve` speaks OpenAI's Responses API (`POST /v1/responses`): the official openai
client's `responses.create`, streamed and not, with instructions, tools and their outputs,
images, encrypted reasoning items and the fields Codex CLI sends, against a small real upstream
on 127.0.0.1 (tests/serve_peers.py)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from conftest import needs

pytestmark = [needs("starlette", "serve"), needs("uvicorn", "serve"), needs("httpx", "serve")]

import httpx  # noqa: E402

from optictx.serve import ServeConfig  # noqa: E402
from optictx.serve.conversations import tenant_of  # noqa: E402

from serve_peers import Proxy, faithful  # noqa: E402

openai = pytest.importorskip("openai")

BUDGET, KEEP = 3000, 4
PATH = "/v1/responses"


@pytest.fixture()
def proxy(upstream):
    p = Proxy(ServeConfig(upstream=upstream.openai_url, vision="auto", budget=BUDGET, keep_recent=KEEP,
                          tenancy="per-key"))
    yield p
    p.stop()


def _client(proxy, key="key-r"):
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=0)


def _post(proxy, body: dict[str, Any]) -> httpx.Response:
    """`body` as json.dumps writes it, so what arrives upstream can be compared byte for byte."""
    return httpx.post(proxy.url + PATH, content=json.dumps(body).encode(),
                      headers={"authorization": "Bearer key-r", "content-type": "application/json"})


def _reasoning(n: int) -> dict[str, Any]:
    return {"type": "reasoning", "id": f"rs_{n}", "summary": [], "encrypted_content": f"gAAAAB{n:04d}" + "x" * 60}


def as_items(messages: list[dict[str, Any]], *, reasoning: bool = False) -> list[dict[str, Any]]:
    """Chat messages as Responses input items, as Codex sends them: system as developer
    messages, each tool call a function_call (after an encrypted reasoning item, if asked),
    each tool result a function_call_output."""
    items: list[dict[str, Any]] = []
    for m in messages:
        if m["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
            continue
        role = "developer" if m["role"] == "system" else m["role"]
        if m.get("content"):
            items.append({"type": "message", "role": role, "content": m["content"]})
        for c in m.get("tool_calls") or []:
            if reasoning:
                items.append(_reasoning(len(items)))
            items.append({"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                          "arguments": c["function"]["arguments"]})
    return items


def _pairs_intact(items: list[dict[str, Any]]) -> None:
    calls: set[str] = set()
    for item in items:
        if item.get("type") == "function_call":
            calls.add(item["call_id"])
        if item.get("type") == "function_call_output":
            assert item["call_id"] in calls, "a tool output went upstream without its call"


def _by_turn(items: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The client's items as the API's turns: a reasoning item goes with the item after it."""
    turns: list[list[dict[str, Any]]] = []
    riding: list[dict[str, Any]] = []
    for item in items:
        riding.append(item)
        if item.get("type") != "reasoning":
            turns.append(riding)
            riding = []
    return turns


def _images(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for i in items if isinstance(i.get("content"), list) for p in i["content"]
            if p.get("type") == "input_image"]


def test_a_long_input_goes_with_its_old_turns_as_pages_and_the_answer_comes_back(proxy, upstream, sample):
    items = as_items(sample[:80])
    raw = _client(proxy).responses.with_raw_response.create(model="gpt-4o", instructions="Be brief.", input=items)
    assert raw.parse().output_text == upstream.reply
    sent, original = map(int, raw.headers["x-optictx-tokens"].split("/"))
    assert sent <= BUDGET < original  # the old turns went as pages, priced for gpt-4o
    arrived = upstream.last(PATH)
    body = arrived.body
    assert arrived.headers["authorization"] == "Bearer key-r"
    assert body["instructions"] == "Be brief." and body["model"] == "gpt-4o"
    pages = _images(body["input"])
    assert pages and all(p["image_url"].startswith("data:image/webp;base64,") for p in pages)
    _pairs_intact(body["input"])
    faithful(_by_turn(items), body["input"], image="input_image", first=1)  # turn #0: the instructions


def test_a_short_input_goes_byte_for_byte_as_it_came(proxy, upstream):
    raw = {"model": "gpt-4o", "input": "Say hi.", "instructions": "You are terse.", "store": False}
    r = _post(proxy, raw)
    assert r.status_code == 200 and r.json()["output"][0]["content"][0]["text"] == upstream.reply
    assert upstream.last(PATH).raw == json.dumps(raw).encode()
    assert r.headers["x-optictx-event"] == "verbatim"


def test_a_stream_is_relayed_event_by_event_and_its_usage_recorded(proxy, upstream, sample):
    client = _client(proxy)
    stream = client.responses.create(model="gpt-4o", input=as_items(sample[:60]), stream=True)
    kinds, text = [], []
    for event in stream:
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            text.append(event.delta)
    assert "".join(text) == upstream.reply and kinds[0] == "response.created" and kinds[-1] == "response.completed"
    client.responses.create(model="gpt-4o", input=as_items(sample[:30]))
    ledger, tenant = proxy.proxy.ledger, tenant_of({"authorization": "Bearer key-r"})
    for _ in range(100):  # a stream's row is written once it has ended
        rows = [r for c in ledger.conversations(tenant) for r in ledger.requests(tenant, c["id"])]
        if len(rows) == 2:
            break
        time.sleep(0.05)
    assert len(rows) == 2
    for row in rows:
        assert row["api"] == "responses"
        assert row["usage"] == {"input": 180, "cache_read": 1920, "cache_write": 0, "output": 11}
        assert row["billed"] == pytest.approx(180 + 0.5 * 1920)  # gpt-4o reads its cache at half price


def test_reasoning_items_go_back_byte_for_byte_beside_their_calls_or_not_at_all(proxy, upstream, sample):
    items = as_items(sample[:80], reasoning=True)
    sent = {json.dumps(i, sort_keys=True) for i in items if i["type"] == "reasoning"}
    assert len(sent) > 3
    _client(proxy).responses.create(model="gpt-4o", input=items, include=["reasoning.encrypted_content"],
                                    store=False)
    body = upstream.last(PATH).body["input"]
    kept = [i for i in body if i.get("type") == "reasoning"]
    assert kept and all(json.dumps(i, sort_keys=True) in sent for i in kept)
    assert len(kept) < len(sent)  # the old ones went onto pages with their calls
    for n, item in enumerate(body):  # each one still right before the call it came with
        if item.get("type") == "reasoning":
            following = body[n + 1]
            origin = next(k for k, i in enumerate(items) if i == item)
            assert following == items[origin + 1]
    _pairs_intact(body)


def test_a_tool_call_round_trips_through_the_client_streamed_and_not(proxy, upstream, sample):
    """The model asks for a tool (after an encrypted reasoning item); the client sends the call,
    its output and the reasoning back, and they arrive as it sent them."""
    client = _client(proxy)
    tools = [{"type": "function", "name": "get_weather", "description": "Weather in a city.", "strict": False,
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
    items = as_items(sample[:60])
    for stream in (False, True):
        upstream.calls = [("get_weather", '{"city": "Paris"}')]
        if stream:
            with client.responses.stream(model="gpt-4o", input=items, tools=tools, store=False) as events:
                answer = events.get_final_response()
        else:
            answer = client.responses.create(model="gpt-4o", input=items, tools=tools, store=False)
        assert upstream.last(PATH).body["tools"] == tools
        reasoning, call = answer.output
        assert call.type == "function_call" and call.name == "get_weather" and call.arguments == '{"city": "Paris"}'
        back = [reasoning.model_dump(exclude_none=True), call.model_dump(exclude_none=True),
                {"type": "function_call_output", "call_id": call.call_id, "output": "18 C, clear"}]
        final = client.responses.create(model="gpt-4o", input=[*items, *back], tools=tools, store=False)
        assert final.output_text == upstream.reply
        assert upstream.last(PATH).body["input"][-3:] == back  # verbatim, in order, after the pages
        items = [*items, *back, {"role": "assistant", "content": final.output_text},
                 {"role": "user", "content": "and tomorrow?"}]


def test_a_growing_session_appends_and_keeps_one_conversation(proxy, upstream, sample):
    client = _client(proxy)
    events, before = [], None
    for step in range(5):
        items = as_items(sample[: 40 + 8 * step], reasoning=True)
        r = client.responses.with_raw_response.create(model="gpt-4o", input=items, store=False)
        body = upstream.last(PATH).body
        faithful(_by_turn(items), body["input"], image="input_image", dropped=True)  # 3,000 tokens drop old pages
        _pairs_intact(body["input"])
        events.append(r.headers["x-optictx-event"])
        if events[-1] == "append":  # the body grew at its end: the last one is its prefix, byte for byte
            assert body["input"][: len(before)] == before, step
        before = body["input"]
    assert "append" in events and events[0] != "append"
    conversations = proxy.proxy.ledger.conversations(tenant_of({"authorization": "Bearer key-r"}))
    assert len(conversations) == 1 and conversations[0]["requests"] == 5


def test_what_codex_sends_is_compressed_and_its_fields_go_on_unchanged(proxy, upstream, sample):
    command = {"type": "array", "items": {"type": "string"}}
    tools = [{"type": "function", "name": "shell", "description": "Runs a command.", "strict": False,
              "parameters": {"type": "object", "properties": {"command": command}}},
             {"type": "namespace", "name": "mcp__files", "tools": []},
             {"type": "web_search", "external_web_access": False}]
    items = [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions/>"}]},
             *as_items(sample[:70], reasoning=True),
             {"type": "web_search_call", "id": "ws_1", "status": "completed",
              "action": {"type": "search", "query": "x"}}]
    body = {"model": "gpt-5-codex", "instructions": "You are Codex.", "input": items, "tools": tools,
            "tool_choice": "auto", "parallel_tool_calls": False, "reasoning": {"effort": "medium"},
            "store": False, "stream": True, "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "019a-session"}
    with httpx.stream("POST", proxy.url + PATH, json=body, headers={"authorization": "Bearer key-r"}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.iter_lines() if line.startswith("event: ")]
    assert events[-1] == "event: response.completed"
    arrived = upstream.last(PATH).body
    for field in ("instructions", "tools", "tool_choice", "parallel_tool_calls", "reasoning", "store", "include",
                  "prompt_cache_key", "model", "stream"):
        assert arrived[field] == body[field], field
    assert arrived["input"][0] == items[0]  # the developer message stays text, first
    assert _images(arrived["input"]) and arrived["input"][-1] == items[-1]


def test_a_request_that_leans_on_upstream_state_goes_as_it_came_and_says_why(proxy, upstream):
    raw = {"model": "gpt-4o", "previous_response_id": "resp_0", "input": [{"role": "user", "content": "go on"}]}
    r = _post(proxy, raw)
    assert r.status_code == 200
    assert r.headers["x-optictx-fallback"] == "upstream-state: previous_response_id"
    assert upstream.last(PATH).raw == json.dumps(raw).encode()
    assert proxy.proxy.ledger.conversations(tenant_of({"authorization": "Bearer key-r"})) == []
    ref = {"model": "gpt-4o", "input": [{"type": "item_reference", "id": "msg_9"}]}
    r = httpx.post(proxy.url + PATH, json=ref, headers={"authorization": "Bearer key-r"})
    assert r.headers["x-optictx-fallback"] == "upstream-state: item_reference"


@pytest.mark.parametrize("body,param", [
    ({"model": "gpt-4o"}, "input"),
    ({"model": "gpt-4o", "input": []}, "input"),
    ({"model": "gpt-4o", "input": [3]}, "input[0]"),
    ({"model": "gpt-4o", "input": [{"role": "user", "content": [{"text": "no type"}]}]}, "input[0].content"),
    ({"model": "gpt-4o", "input": "hi", "instructions": ["not", "text"]}, "instructions"),
    ({"model": "gpt-4o", "input": [_reasoning(1)]}, "input"),
    ({"model": "gpt-4o", "input": [{"type": "function_call_output", "call_id": "c1", "output": "x"}],
      "tools": {"not": "a list"}}, "tools"),
])
def test_a_request_not_understood_goes_as_it_came_naming_its_field(proxy, upstream, body, param):
    """The upstream, not the proxy, says whether such a request is valid: it goes as it came,
    byte for byte, and nothing is stored."""
    raw = json.dumps(body).encode()
    r = httpx.post(proxy.url + PATH, content=raw, headers={"authorization": "Bearer key-r",
                                                           "content-type": "application/json"})
    assert r.status_code == 200, r.text
    assert r.headers["x-optictx-fallback"].startswith(f"unknown-shape: {param}")
    assert [a.raw for a in upstream.arrivals if a.path == PATH] == [raw]
    assert proxy.proxy.ledger.conversations(tenant_of({"authorization": "Bearer key-r"})) == []


def test_an_image_in_a_recent_turn_goes_as_the_client_sent_it(proxy, upstream, sample):
    import base64
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64, 48), "blue").save(buf, format="PNG")
    png_data_url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    image = {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "what is in this picture?"},
        {"type": "input_image", "image_url": png_data_url, "detail": "low"}]}
    items = [*as_items(sample[:60]), image]
    _client(proxy).responses.create(model="gpt-4o", input=items)
    assert upstream.last(PATH).body["input"][-1] == image
