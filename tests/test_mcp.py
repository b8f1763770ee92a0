"""The proxy's MCP server (issue 45): the official `mcp` client, over Streamable HTTP at /mcp,
reads the exact turns behind the pages the proxy sent upstream, and nothing of another tenant's.
The oracles are the upstream's recorded body (the labels beside the pages) and the turns the
test sent."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import pytest
from conftest import needs

pytestmark = [needs("starlette", "serve"), needs("uvicorn", "serve"), needs("mcp", "serve")]

from optictx.handles import ALPHABET, LENGTH  # noqa: E402
from optictx.serve import ServeConfig  # noqa: E402

from serve_peers import Proxy  # noqa: E402

openai = pytest.importorskip("openai")
LABEL = re.compile(rf"\[page ([{ALPHABET}]{{{LENGTH}}}): turns #(\d+)-#(\d+)\]")
PROXY_KEY = "a-proxy-key-of-some-length"


def _calls(url: str, calls: list[tuple[str, dict]], headers: dict | None = None) -> list[tuple[str, bool]]:
    """Each (tool, arguments) called through the SDK's client in one session: (text, is_error)."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def run() -> list[tuple[str, bool]]:
        async with httpx.AsyncClient(headers=headers or {}) as http, \
                streamable_http_client(url + "/mcp", http_client=http) as (read, write, *_), \
                ClientSession(read, write) as session:
            await session.initialize()
            names = [t.name for t in (await session.list_tools()).tools]
            assert names == ["search", "recall"]
            out = []
            for name, args in calls:
                r = await session.call_tool(name, args)
                out.append((r.content[0].text, bool(r.is_error)))
            return out

    return asyncio.run(run())


def _sent(proxy, upstream, sample, key="key-a", **headers):
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=0, default_headers=headers)
    client.chat.completions.create(model="deepseek-ocr", messages=sample[:80])
    body = str(upstream.last("/v1/chat/completions").body)
    labels = [(h, int(a), int(b)) for h, a, b in LABEL.findall(body)]
    assert labels, "pages went upstream, each after its label"
    return labels


def _text(message: dict) -> str:
    return message.get("content") or ""


@pytest.fixture
def personal(upstream):
    p = Proxy(ServeConfig(upstream=upstream.openai_url, budget=3000, keep_recent=4))
    yield p
    p.stop()


def test_recall_gives_the_turns_behind_a_page_the_model_was_shown(personal, upstream, sample):
    labels = _sent(personal, upstream, sample)
    handle, first, last = labels[0]
    needle = next(_text(m) for m in sample[first : last + 1] if len(_text(m)) > 40)[:40]
    (recalled, error), (found, _), (missing, missing_error) = _calls(personal.url, [
        ("recall", {"page": handle}), ("search", {"query": needle}), ("recall", {"page": "k7m3pdxaw"})])
    assert not error
    for m in sample[first : last + 1]:
        assert _text(m) in recalled  # word for word, as the client sent it
        for c in m.get("tool_calls") or []:
            assert c["function"]["arguments"] in recalled
    assert f"page {handle}" in found and needle[:20] in found
    assert missing_error and "no page" in missing


def test_a_tenant_sees_none_of_another_tenants_pages(upstream, sample):
    p = Proxy(ServeConfig(upstream=upstream.openai_url, budget=3000, keep_recent=4, proxy_key=PROXY_KEY))
    try:
        labels = _sent(p, upstream, sample, key="key-a", **{"X-Optictx-Key": PROXY_KEY})
        handle, first, last = labels[0]
        needle = next(_text(m) for m in sample[first : last + 1] if len(_text(m)) > 40)[:40]
        asks = [("recall", {"page": handle}), ("search", {"query": needle}),
                ("search", {"query": needle, "within": handle})]
        mine = _calls(p.url, asks, {"X-Optictx-Key": PROXY_KEY, "Authorization": "Bearer key-a"})
        theirs = _calls(p.url, asks, {"X-Optictx-Key": PROXY_KEY, "Authorization": "Bearer key-b"})
        assert not mine[0][1] and _text(sample[first]) in mine[0][0] and handle in mine[1][0]
        assert theirs[0] == (f"error: page: no page {handle!r} in your conversations (a page's label names its "
                             "handle)", True)
        assert "no turn" in theirs[1][0] and theirs[2][1]
        assert needle not in str(theirs)
        refused = httpx.post(p.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                             headers={"Authorization": "Bearer key-a", "Accept": "application/json, text/event-stream"})
        assert refused.status_code == 401  # without the proxy key, nothing
    finally:
        p.stop()


def test_the_caption_names_the_tools_when_the_request_carries_them(personal, upstream, sample):
    from optictx.tools import SPECS

    tools = [{"type": "function", "function": {"name": f"mcp__optictx__{s.name}", "description": s.description,
                                               "parameters": s.schema()}} for s in SPECS]
    client = openai.OpenAI(base_url=personal.url + "/v1", api_key="k", max_retries=0)
    client.chat.completions.create(model="deepseek-ocr", messages=sample[:80], tools=tools)
    told = str(upstream.last("/v1/chat/completions").body)
    client.chat.completions.create(model="deepseek-ocr", messages=sample[:70])
    plain = str(upstream.last("/v1/chat/completions").body)
    assert "call mcp__optictx__search first" in told and "mcp__optictx__recall" not in plain.replace(str(tools), "")


def test_a_stateless_server_opens_no_stream_and_answers_every_call(personal):
    """GET /mcp would open an event stream that never ends (300 of them were all held): 405. A
    call whose JSON-RPC id is an object got 202 and was dropped: it is answered, an error."""
    with httpx.Client(base_url=personal.url, timeout=10) as http:
        got = http.get("/mcp", headers={"accept": "text/event-stream"})
        assert got.status_code == 405 and "POST" in got.headers["allow"]
        call = {"jsonrpc": "2.0", "id": {"an": "object"}, "method": "tools/list"}
        for bad in ({"an": "object"}, [1], True, 1.5, None):  # each once dropped with a 202, or answered so
            answer = http.post("/mcp", json={**call, "id": bad},
                               headers={"accept": "application/json, text/event-stream"})
            assert answer.status_code == 400 and answer.json()["error"]["code"] == -32600, bad
        ok = http.post("/mcp", json={**call, "id": 7}, headers={"accept": "application/json, text/event-stream"})
        assert ok.status_code == 200 and [t["name"] for t in ok.json()["result"]["tools"]] == ["search", "recall"]


def test_mcp_bodies_count_among_the_bytes_in_flight(upstream):
    """An MCP body is held within --max-inflight-bytes like an API request's: over it, 503."""
    p = Proxy(ServeConfig(upstream=upstream.openai_url, max_inflight_bytes=4096))
    try:
        with httpx.Client(base_url=p.url, timeout=10) as http:
            big = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"pad": "x" * 8000}}
            answer = http.post("/mcp", json=big, headers={"accept": "application/json, text/event-stream"})
            assert answer.status_code == 503 and "max-inflight-bytes" in answer.json()["error"]["message"]
    finally:
        p.stop()


def test_a_damaged_store_is_an_error_that_names_no_server_path(upstream, sample, tmp_path):
    """After a restart a page's turns come from its conversation's file: damaged, `recall` says
    so and what to do, never where the file lies (docs/proxy.md: no error names a server path)."""
    first = Proxy(ServeConfig(upstream=upstream.openai_url, budget=3000, keep_recent=4, store=tmp_path))
    try:
        handle = _sent(first, upstream, sample)[0][0]
    finally:
        first.stop()
    for db in tmp_path.glob("*.db"):
        if db.name != "optictx-serve.db":  # the ledger stays; the conversation's own file is damaged
            with open(db, "r+b") as f:
                f.seek(100)
                f.write(b"\xff" * 4000)
    again = Proxy(ServeConfig(upstream=upstream.openai_url, budget=3000, keep_recent=4, store=tmp_path))
    try:
        [(text, error)] = _calls(again.url, [("recall", {"page": handle})])
        assert error and "cannot be read" in text and str(tmp_path) not in text and ".db" not in text, text
    finally:
        again.stop()


def test_the_model_naming_the_tools_itself_leaves_the_caption_as_it_was(upstream, sample):
    """With no MCP server, a model's own ToolSearch call that names `mcp__optictx__search` and
    `recall` said nothing of the tools it has, yet once changed the caption mid-conversation and
    rewrote the cached front (55,370 units against 12,414). Only the client's words name them:
    the front the upstream gets stays the same bytes; named in a system message, they are said."""
    anthropic = pytest.importorskip("anthropic")
    from serve_peers import to_anthropic_messages

    p = Proxy(ServeConfig(anthropic_upstream=upstream.anthropic_url, budget=3000, keep_recent=4))
    try:
        client = anthropic.Anthropic(base_url=p.url, api_key="k", max_retries=0)
        system, messages = to_anthropic_messages(sample[:80])
        if messages[-1]["role"] == "assistant":
            messages = messages[:-1]
        client.messages.create(model="claude-sonnet-4-5", max_tokens=5, system=system, messages=messages)
        before = upstream.last("/v1/messages").body["messages"]
        named = "select:mcp__optictx__search,mcp__optictx__recall"
        search = {"type": "tool_use", "id": "toolu_ts", "name": "ToolSearch", "input": {"query": named}}
        more = [*messages, {"role": "assistant", "content": [search]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_ts",
                                              "content": "No matching deferred tools found"}]}]
        client.messages.create(model="claude-sonnet-4-5", max_tokens=5, system=system, messages=more)
        after = upstream.last("/v1/messages").body["messages"]
        assert "mcp__optictx__search first" not in json.dumps(after)
        assert after[: len(before) - 1] == before[:-1]  # the front read back, not written again
        said = [*more, {"role": "user", "content": "Deferred tools: mcp__optictx__search, mcp__optictx__recall"}]
        parsed_names = {m.decode() for m in _mentions(said)}
        assert parsed_names == {"mcp__optictx__search", "mcp__optictx__recall"}
    finally:
        p.stop()


def _mentions(messages):
    """What the proxy takes as the client naming the tools, for these messages."""
    from optictx.serve.anthropic_api import ANTHROPIC

    body = {"model": "m", "max_tokens": 5, "messages": messages}
    return ANTHROPIC.parse(body, json.dumps(body).encode()).mentions
