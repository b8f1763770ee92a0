"""`optictx serve` end to end: the official openai and anthropic SDKs talk to the proxy on
127.0.0.1, the proxy talks to a small real upstream on 127.0.0.1 (tests/serve_peers.py) that
records what arrives. What reaches the upstream and what the client gets back are checked."""

from __future__ import annotations

import base64
import json
import os
import stat

import pytest
from conftest import needs

pytestmark = [needs("starlette", "serve"), needs("uvicorn", "serve"), needs("httpx", "serve")]

import httpx  # noqa: E402

from optictx.errors import ConfigError  # noqa: E402
from optictx.serve import ServeConfig  # noqa: E402
from optictx.serve.anthropic_api import MAX_BREAKPOINTS  # noqa: E402
from optictx.serve.openai_api import OPENAI  # noqa: E402

from serve_peers import Proxy, Reference, faithful, newest_key, to_anthropic_messages  # noqa: E402

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

BUDGET, KEEP = 3000, 4


@pytest.fixture()
def proxy(upstream, tmp_path):
    p = Proxy(ServeConfig(upstream=upstream.openai_url, anthropic_upstream=upstream.anthropic_url, vision="auto",
                          tenancy="per-key",
                          budget=BUDGET, keep_recent=KEEP))
    yield p
    p.stop()


def _openai(proxy, key="key-a", **kw):
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=0, **kw)


def _anthropic(proxy, key="key-a", **kw):
    return anthropic.Anthropic(base_url=proxy.url, api_key=key, max_retries=0, **kw)


def _tool_pairs_intact_openai(messages):
    calls = set()
    for m in messages:
        calls.update(c["id"] for c in m.get("tool_calls") or [])
        if m["role"] == "tool":
            assert m["tool_call_id"] in calls, "a tool result went upstream without its call"


def _faithful_openai(client: list[dict], body: dict, *, dropped: bool = False) -> None:
    faithful([[m] for m in client], body["messages"], image="image_url", dropped=dropped)


def _images_openai(messages):
    return [p for m in messages if isinstance(m.get("content"), list) for p in m["content"] if p["type"] == "image_url"]


def test_openai_request_goes_fitted_and_the_answer_comes_back_unchanged(proxy, upstream, sample):
    messages = sample[:80]
    raw = _openai(proxy).chat.completions.with_raw_response.create(model="deepseek-ocr", messages=messages)
    assert raw.parse().choices[0].message.content == upstream.reply
    sent = upstream.last("/v1/chat/completions")
    body = sent.body
    assert sent.headers["authorization"] == "Bearer key-a"  # the credential passes through
    assert _images_openai(body["messages"]), "old turns went as page images"
    _tool_pairs_intact_openai(body["messages"])
    _faithful_openai(messages, body)
    assert int(raw.headers["x-optictx-tokens"].split("/")[0]) <= BUDGET


def test_openai_stream_is_relayed_chunk_by_chunk(proxy, upstream, sample):
    stream = _openai(proxy).chat.completions.create(model="gpt-4o", messages=sample[:60], stream=True)
    pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    assert len(pieces) > 3 and "".join(pieces) == upstream.reply
    assert upstream.last("/v1/chat/completions").body["stream"] is True


def test_a_growing_chat_sends_what_its_history_of_calls_determines(proxy, upstream, sample):
    client = _openai(proxy)
    history = list(sample[:30])
    events, before = [], None
    for step in range(6):
        history += sample[30 + 8 * step: 38 + 8 * step]
        raw = client.chat.completions.with_raw_response.create(model="deepseek-ocr", messages=history)
        body = upstream.last("/v1/chat/completions").body
        _faithful_openai(history, body)
        events.append(raw.headers["x-optictx-event"])
        if events[-1] == "append":  # the body grew at its end: the last one is its prefix, byte for byte
            assert body["messages"][: len(before)] == before, step
        before = body["messages"]
    assert "append" in events and events[0] != "append"
    conversations = proxy.proxy.ledger.conversations(_tenant("key-a"))
    assert len(conversations) == 1 and conversations[0]["requests"] == 6  # one memory, grown


def _tenant(key):
    from optictx.serve.conversations import tenant_of

    return tenant_of({"authorization": f"Bearer {key}"})


def test_an_edited_turn_forks_and_no_turn_of_the_other_branch_goes_upstream(proxy, upstream, sample):
    client = _openai(proxy)
    history = list(sample[:70])
    first = client.chat.completions.with_raw_response.create(model="deepseek-ocr", messages=history)
    edited = [*history[:40], {"role": "user", "content": "EDITED-BRANCH-7731 instead, do the other thing"}]
    second = client.chat.completions.with_raw_response.create(model="deepseek-ocr", messages=edited)
    a, b = first.headers["x-optictx-conversation"], second.headers["x-optictx-conversation"]
    assert a != b  # a fork
    body = upstream.last("/v1/chat/completions").body
    _faithful_openai(edited, body)  # the fork's turns, each once, none of the other branch's
    later = json.dumps(history[40:])
    assert all(m["content"] not in later for m in body["messages"] if isinstance(m.get("content"), str) and
               len(m["content"]) > 30 and m not in history[:40])
    # the old branch continues as itself
    third = client.chat.completions.with_raw_response.create(model="deepseek-ocr",
                                                             messages=[*history, {"role": "user", "content": "go on"}])
    assert third.headers["x-optictx-conversation"] == a


def test_two_keys_with_the_same_messages_never_share_a_memory_or_dashboard_rows(proxy, upstream, sample):
    ra = _openai(proxy, "key-a").chat.completions.with_raw_response.create(model="gpt-4o", messages=sample[:50])
    rb = _openai(proxy, "key-b").chat.completions.with_raw_response.create(model="gpt-4o", messages=sample[:50])
    ca, cb = ra.headers["x-optictx-conversation"], rb.headers["x-optictx-conversation"]
    assert ca != cb
    assert upstream.arrivals[-2].headers["authorization"] == "Bearer key-a"
    assert upstream.arrivals[-1].headers["authorization"] == "Bearer key-b"
    with httpx.Client(base_url=proxy.url) as http:
        mine = http.get("/optictx/api/conversations", headers={"authorization": "Bearer key-a"}).json()
        assert [c["id"] for c in mine["conversations"]] == [ca]
        theirs = http.get(f"/optictx/api/conversations/{cb}", headers={"authorization": "Bearer key-a"})
        assert theirs.status_code == 404
        for path in ("pages", "pages/0.webp"):
            assert http.get(f"/optictx/api/conversations/{cb}/{path}",
                            headers={"authorization": "Bearer key-a"}).status_code == 404
        assert http.get(f"/optictx/api/conversations/{cb}/pages/0.webp",
                        headers={"authorization": "Bearer key-b"}).headers["content-type"] == "image/webp"
    records = proxy.proxy.ledger
    assert "key-a" not in json.dumps(records.conversations(_tenant("key-a")))


def test_a_conversation_that_fits_goes_upstream_byte_for_byte(proxy, upstream):
    raw = b'{"messages":[{"role":"user","content":"hi \\u00e9",  "extra_field": 1}],   "model":"gpt-4o"}'
    with httpx.Client(base_url=proxy.url) as http:
        r = http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 200
    assert upstream.last("/v1/chat/completions").raw == raw
    assert r.headers["x-optictx-tokens"].split("/")[0] == r.headers["x-optictx-tokens"].split("/")[1]


def test_headers_set_the_budget_and_name_the_conversation(proxy, upstream, sample):
    client = _openai(proxy, default_headers={"X-Optictx-Budget": "1500", "X-Optictx-Conversation": "chat-42"})
    r = client.chat.completions.with_raw_response.create(model="deepseek-ocr", messages=sample[:80])
    sent, original = map(int, r.headers["x-optictx-tokens"].split("/"))
    assert sent <= 1500 < original
    assert proxy.proxy.ledger.conversations(_tenant("key-a"))[0]["name"] == "chat-42"
    _faithful_openai(sample[:80], upstream.last("/v1/chat/completions").body, dropped=True)
    bad = _openai(proxy, default_headers={"X-Optictx-Budget": "lots"})
    with pytest.raises(openai.BadRequestError, match="X-Optictx-Budget"):
        bad.chat.completions.create(model="gpt-4o", messages=sample[:3])


def test_anthropic_tools_round_trip_with_cache_breakpoints_and_the_answer_unchanged(proxy, upstream, sample):
    system, messages = to_anthropic_messages(sample[:90])
    client = _anthropic(proxy)
    answer = client.messages.create(model="claude-sonnet-4-5", max_tokens=100, system=system, messages=messages)
    assert answer.content[0].text == upstream.reply
    body = upstream.last("/v1/messages").body
    got = upstream.last("/v1/messages").headers
    assert "key-a" in (got.get("x-api-key") or got["authorization"])  # as the SDK sent it (versions differ)
    blocks = [b for m in body["messages"] for b in m["content"]]
    assert any(b["type"] == "image" for b in blocks), "old turns went as page images"
    uses = set()
    for m in body["messages"]:  # every tool_result right after its tool_use
        for b in m["content"]:
            if b["type"] == "tool_use":
                uses.add(b["id"])
            if b["type"] == "tool_result":
                assert b["tool_use_id"] in uses
    assert uses, "the recent turns hold tool calls"
    roles = [m["role"] for m in body["messages"]]
    assert roles[0] == "user" and all(x != y for x, y in zip(roles, roles[1:]))
    marks = [b for b in [*body["system"], *blocks] if "cache_control" in b]
    assert 1 <= len(marks) <= MAX_BREAKPOINTS
    assert any(b["type"] == "image" and "cache_control" in b for b in blocks)  # the end of the pages
    # What is not a page is the client's: every tool call and result byte for byte, in order, and
    # the newest message's blocks as the client sent them (less the breakpoint that marks them).
    def bare(b):
        return json.dumps({k: v for k, v in b.items() if k != "cache_control"}, sort_keys=True)

    theirs = [bare(b) for m in messages for b in (m["content"] if isinstance(m["content"], list)
                                                  else [{"type": "text", "text": m["content"]}])]
    at = -1
    for b in blocks:
        if b["type"] in ("tool_use", "tool_result"):
            at = theirs.index(bare(b), at + 1)
    newest = messages[-1]["content"]
    newest = newest if isinstance(newest, list) else [{"type": "text", "text": newest}]
    assert [bare(b) for b in blocks[-len(newest):]] == [bare(b) for b in newest]


def test_anthropic_stream_is_relayed(proxy, upstream, sample):
    system, messages = to_anthropic_messages(sample[:40])
    with _anthropic(proxy).messages.stream(model="claude-haiku-4-5", max_tokens=50, system=system,
                                           messages=messages) as stream:
        text = "".join(stream.text_stream)
    assert text == upstream.reply


def test_count_tokens_answers_for_the_fitted_request_and_stores_nothing(proxy, upstream, sample):
    system, messages = to_anthropic_messages(sample[:90])
    count = _anthropic(proxy).messages.count_tokens(model="claude-sonnet-4-5", system=system, messages=messages)
    arrived = upstream.last("/v1/messages/count_tokens")
    assert count.input_tokens == len(arrived.raw) // 4
    assert any(b["type"] == "image" for m in arrived.body["messages"] for b in m["content"])
    assert proxy.proxy.ledger.conversations(_tenant("key-a")) == []
    # A conversation that holds exactly these messages answers as it is: the same messages go.
    client = _anthropic(proxy)
    client.messages.create(model="claude-sonnet-4-5", max_tokens=9, system=system, messages=messages)
    client.messages.count_tokens(model="claude-sonnet-4-5", system=system, messages=messages)
    assert upstream.last("/v1/messages/count_tokens").body["messages"] == upstream.last("/v1/messages").body["messages"]
    assert [c["requests"] for c in proxy.proxy.ledger.conversations(_tenant("key-a"))] == [1]


def test_upstream_errors_keep_their_status_and_retry_after(proxy, upstream, sample):
    upstream.fail = (429, {"retry-after": "7"})
    with pytest.raises(openai.RateLimitError) as err:
        _openai(proxy).chat.completions.create(model="gpt-4o", messages=sample[:5])
    assert err.value.response.headers["retry-after"] == "7"
    upstream.fail = (529, {})
    with pytest.raises(anthropic.APIStatusError) as err2:
        _anthropic(proxy).messages.create(model="claude-x", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert err2.value.status_code == 529


def test_a_stream_that_breaks_upstream_ends_with_an_error_event(proxy, upstream, sample):
    upstream.break_stream = True
    with pytest.raises(openai.APIError, match="broke off"):
        for _ in _openai(proxy).chat.completions.create(model="gpt-4o", messages=sample[:5], stream=True):
            pass
    upstream.break_stream = True
    with pytest.raises(anthropic.APIError, match="broke off"), _anthropic(proxy).messages.stream(
            model="claude-x", max_tokens=5, messages=[{"role": "user", "content": "x"}]) as s:
        for _ in s.text_stream:
            pass


def test_an_unreachable_upstream_is_a_502_in_the_api_shape(tmp_path):
    p = Proxy(ServeConfig(upstream="http://127.0.0.1:9/v1", budget=BUDGET))  # port 9: nothing listens
    try:
        with pytest.raises(openai.APIStatusError) as err:
            _openai(p).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
        assert err.value.status_code == 502 and "unreachable" in str(err.value)
        with httpx.Client(base_url=p.url) as http:  # no Anthropic upstream configured: said so
            r = http.post("/v1/messages", json={"model": "claude-x", "max_tokens": 5,
                                                "messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 404 and "--anthropic-upstream" in r.json()["error"]["message"]
    finally:
        p.stop()


@pytest.mark.parametrize("raw, where", [(b"{not json", "not JSON"), (b"[1, 2]", "JSON object")])
def test_a_body_that_is_not_a_json_object_gets_400_in_the_api_shape_and_stores_nothing(proxy, upstream, raw, where):
    with httpx.Client(base_url=proxy.url) as http:
        json_ = {"content-type": "application/json"}
        r = http.post("/v1/chat/completions", content=raw, headers={"authorization": "Bearer key-a", **json_})
        ra = http.post("/v1/messages", content=raw, headers={"x-api-key": "key-a", **json_})
    assert r.status_code == 400 and where in r.json()["error"]["message"]
    assert ra.status_code == 400 and ra.json()["type"] == "error"
    assert not upstream.arrivals
    assert proxy.proxy.ledger.conversations(_tenant("key-a")) == []


ODD = {"model": "claude-sonnet-4", "max_tokens": 10, "messages": [
    {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "run", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [None]}]}]}


@pytest.mark.parametrize("path, raw, where", [
    ("/v1/chat/completions", b'{"model": "gpt-4o"}', "messages"),
    ("/v1/chat/completions", b'{"model": "gpt-4o", "messages": [{"role": "tool", "content": "x"}]}', "tool_call_id"),
    ("/v1/chat/completions", b'{"model": "gpt-4o", "messages": [{"role": "user", "content": 5}]}', "messages[0]"),
    ("/v1/messages", json.dumps(ODD).encode(), "messages[1].content[0].content[0]"),
    ("/v1/messages", b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "a", "role": "x"}]}',
     "twice"),
    ("/v1/responses", b'{"model": "gpt-5", "input": [{"type": "function_call_output", "call_id": 7}]}', "input[0]"),
])
def test_a_request_the_proxy_does_not_understand_goes_as_it_came_and_says_where(proxy, upstream, path, raw, where):
    """Never refuse what the upstream may take: the client's bytes go upstream unchanged, the
    answer is relayed, X-Optictx-Fallback says what was not understood, and nothing is stored."""
    from optictx.serve.answers import FALLBACKS

    before = FALLBACKS["unknown-shape"]
    auth = {"x-api-key": "key-a"} if path == "/v1/messages" else {"authorization": "Bearer key-a"}
    with httpx.Client(base_url=proxy.url) as http:
        r = http.post(path, content=raw, headers={"content-type": "application/json", **auth})
        status = http.get("/optictx/api/status").json()
    assert r.status_code == 200, r.text
    assert r.headers["x-optictx-fallback"].startswith("unknown-shape: ") and where in r.headers["x-optictx-fallback"]
    assert [a.raw for a in upstream.arrivals] == [raw]
    assert FALLBACKS["unknown-shape"] == before + 1 and status["fallbacks"]["unknown-shape"] >= 1
    assert proxy.proxy.ledger.conversations(_tenant("key-a")) == []


def test_oversized_bodies_unknown_paths_and_models(proxy, upstream):
    with httpx.Client(base_url=proxy.url) as http:
        big = http.post("/v1/chat/completions", content=b"x" * (33 * 2**20),
                        headers={"content-type": "application/json"})
        assert big.status_code == 413
        missing = http.get("/v1/embeddings")
        assert missing.status_code == 404 and "no route GET /v1/embeddings" in missing.json()["error"]["message"]
        assert http.post("/v2/anything").status_code == 404
    models = _openai(proxy).models.list()
    assert [m.id for m in models.data] == ["up-model"]


def test_a_non_loopback_host_needs_allow_remote_and_then_the_proxy_key(upstream):
    with pytest.raises(ConfigError, match="allow-remote"):
        ServeConfig.make(upstream=upstream.openai_url, host="0.0.0.0")
    p = Proxy(ServeConfig(upstream=upstream.openai_url, proxy_key="k" * 24))
    try:
        with pytest.raises(openai.AuthenticationError, match="proxy"):
            _openai(p).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
        ok = _openai(p, default_headers={"X-Optictx-Key": "k" * 24})
        assert ok.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}]).choices
        assert "x-optictx-key" not in upstream.last("/v1/chat/completions").headers  # never forwarded
        with httpx.Client(base_url=p.url) as http:
            assert http.get("/optictx/").status_code == 401
            assert http.get("/optictx/", headers={"x-optictx-key": "k" * 24}).status_code == 200
    finally:
        p.stop()


def test_a_stored_conversation_continues_after_a_restart_without_rendering_again(upstream, tmp_path, sample,
                                                                                    monkeypatch):
    config = ServeConfig(upstream=upstream.openai_url, budget=BUDGET, keep_recent=KEEP, store=tmp_path / "s",
                         tenancy="per-key")
    p = Proxy(config)
    try:
        r1 = _openai(p).chat.completions.with_raw_response.create(model="deepseek-ocr", messages=sample[:80])
        reference = Reference(OPENAI, budget=BUDGET, keep=KEEP, key=newest_key(p.proxy.ledger))
        reference.send({"model": "deepseek-ocr", "messages": sample[:80]})
        first = p.proxy.conversations.find(_tenant("key-a"), r1.headers["x-optictx-conversation"])
        stored_upto = max(tid for page in first.memory.pages if page.sealed for tid in page.turn_ids)
    finally:
        p.stop()
    files = sorted((tmp_path / "s").iterdir())
    assert files and all(stat.S_IMODE(os.stat(f).st_mode) == 0o600 for f in files if f.is_file())
    assert not any(b"key-a" in f.read_bytes() for f in files)  # the API key is never stored
    from optictx.renderers import Layout

    calls = []
    real = Layout.lines
    monkeypatch.setattr(Layout, "lines", lambda self, block: calls.append(block) or real(self, block))
    p = Proxy(config)
    try:
        history = [*sample[:80], *sample[80:84]]
        r2 = _openai(p).chat.completions.with_raw_response.create(model="deepseek-ocr", messages=history)
        assert r2.headers["x-optictx-conversation"] == r1.headers["x-optictx-conversation"]
        # Pages came back from the file: only the turns after the last stored page are laid out.
        assert calls and len(calls) <= 4 * (len(history) - stored_upto) < 2 * len(history)
        # The plan state came back too: the body is what one process would have sent.
        assert upstream.last("/v1/chat/completions").body == reference.send({"model": "deepseek-ocr",
                                                                               "messages": history})[0]
    finally:
        p.stop()


@pytest.mark.parametrize("tools", [False, True])
def test_after_a_restart_the_dashboard_shows_the_latest_requests_pages_again(upstream, tmp_path, sample, tools):
    """The pages of a conversation's latest request are drawn again from its plan state after a
    restart: the same pages, the same pixels, as the model got them; with the MCP tools in the
    request too (they are in the caption and the plan state's key: a restart drew other pages)."""
    from optictx.tools import ABOUT

    given = {"tools": [{"type": "function", "function": {"name": f"mcp__optictx__{name}", "description": ABOUT,
                                                         "parameters": {"type": "object", "properties": {}}}}
                       for name in ("search", "recall")]} if tools else {}
    config = ServeConfig(upstream=upstream.openai_url, budget=BUDGET, keep_recent=KEEP, store=tmp_path / "s",
                         tenancy="per-key")
    auth = {"authorization": "Bearer key-a"}

    def dashboard(p: Proxy, cid: str) -> tuple[dict, list[bytes]]:
        with httpx.Client(base_url=p.url) as http:
            pages = http.get(f"/optictx/api/conversations/{cid}/pages", headers=auth)
            assert pages.status_code == 200, pages.text
            shown = pages.json()
            return shown, [http.get(f"/optictx/api/conversations/{cid}/pages/{q['n']}.webp", headers=auth).content
                           for q in shown["pages"] if q["image"]]

    p = Proxy(config)
    try:
        for end in (60, 70, 80):  # a growing conversation, the last request compressed
            r = _openai(p).chat.completions.with_raw_response.create(model="deepseek-ocr", messages=sample[:end],
                                                                     **given)
        cid = r.headers["x-optictx-conversation"]
        before, pngs = dashboard(p, cid)
    finally:
        p.stop()
    sent = [b for m in upstream.last("/v1/chat/completions").body["messages"] if isinstance(m["content"], list)
            for b in m["content"] if b["type"] == "image_url"]
    assert before["pages"] and len(pngs) == len(sent) > 0  # what the model got, page for page
    assert [base64.b64decode(b["image_url"]["url"].split(",", 1)[1]) for b in sent] == pngs
    p = Proxy(config)
    try:
        after, again = dashboard(p, cid)
        assert after == before and again == pngs
        with httpx.Client(base_url=p.url) as http:  # another key sees nothing of it
            other = http.get(f"/optictx/api/conversations/{cid}/pages", headers={"authorization": "Bearer key-b"})
        assert other.status_code == 404
    finally:
        p.stop()


def test_vision_auto_prices_by_the_model_name(proxy, upstream, sample):
    from optictx.serve.proxy import vision_for

    assert vision_for("claude-opus-4", "openai", "auto") == "anthropic"
    assert vision_for("gpt-4.1-mini-2025", "openai", "auto") == "openai:gpt-4.1-mini"
    assert vision_for("deepseek-ai/DeepSeek-OCR", "openai", "auto") == "deepseek-ocr"
    assert vision_for("my-local-llm", "openai", "auto") == "openai:gpt-4o"
    assert vision_for("my-local-llm", "anthropic", "auto") == "anthropic"
    assert vision_for("claude-x", "anthropic", "gemini") == "gemini"
    r = _openai(proxy).chat.completions.with_raw_response.create(model="claude-3-haiku", messages=sample[:3])
    assert r.headers["x-optictx-vision"] == "anthropic"


@pytest.mark.slow
def test_eight_clients_fifty_requests_each_no_error_no_cross_talk_budgets_held(proxy, upstream, sample):
    """8 concurrent clients x 50 requests: four on conversations of their own (two keys), four on
    two shared ones; each request a chat step. Every upstream body is the right tenant's history
    fitted within its budget."""
    import threading

    errors: list[BaseException] = []
    marks = {}

    def client(n: int) -> None:
        key = f"key-{n % 2}"
        shared = n >= 4
        tag = f"CONV-{n % 2 if shared else n}-{key}"
        marks[n] = tag
        c = _openai(proxy, key, default_headers={"X-Optictx-Budget": "2000"})
        history = [{"role": "system", "content": f"conversation {tag}"}]
        try:
            for step in range(50):
                history = [*history, sample[1 + (step * 3) % 200], {"role": "user", "content": f"{tag} step {step}"}]
                # A shared conversation: both clients send the same history, so one memory grows.
                r = c.chat.completions.with_raw_response.create(model="deepseek-ocr", messages=history)
                sent, _ = map(int, r.headers["x-optictx-tokens"].split("/"))
                assert sent <= 2000
        except BaseException as exc:  # collected: a thread's failure must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors[:3]
    assert len(upstream.arrivals) == 400
    for a in upstream.arrivals:
        key = a.headers["authorization"].removeprefix("Bearer ")
        text = json.dumps(a.body["messages"])
        tags = {tag for tag in marks.values() if tag in text}
        assert len(tags) == 1 and tags.pop().endswith(key), "a request carried another conversation's turns"


def test_the_chat_app_example_runs_through_the_proxy(proxy, upstream):
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "examples" / "chat_app.py"
    env = {**os.environ, "OPTICTX_PROXY": proxy.url + "/v1", "OPENAI_API_KEY": "key-c", "OPTICTX_MODEL": "gpt-4o"}
    done = subprocess.run([sys.executable, str(example)], input="what happened first?\nand then?\n\n", env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(upstream.reply) == 2 and "sent " in done.stdout
    bodies = [a.body for a in upstream.arrivals]
    assert len(bodies) == 2 and _images_openai(bodies[1]["messages"])


def test_client_images_in_recent_turns_pass_through_as_sent(proxy, upstream, sample):
    import base64
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64, 48), "blue").save(buf, format="PNG")
    data = base64.b64encode(buf.getvalue()).decode()
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}", "detail": "low"}}
    ask = {"role": "user", "content": [{"type": "text", "text": "what is in this picture?"}, image]}
    _openai(proxy).chat.completions.create(model="gpt-4o", messages=[*sample[:80], ask])
    assert upstream.last("/v1/chat/completions").body["messages"][-1] == ask
    block = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    system, messages = to_anthropic_messages(sample[:80])
    messages[-1]["content"] = [*messages[-1]["content"], block] if messages[-1]["role"] == "user" else \
        messages[-1]["content"]
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": [block]})
    _anthropic(proxy).messages.create(model="claude-x", max_tokens=5, system=system, messages=messages)
    sent = upstream.last("/v1/messages").body["messages"][-1]["content"]
    assert {k: v for k, v in sent[-1].items() if k != "cache_control"} == block


def test_a_request_that_cannot_fit_goes_as_it_came_and_says_so(proxy, upstream):
    raw = json.dumps({"model": "gpt-4o", "messages": [{"role": "system", "content": "rule " * 5000},
                                                       {"role": "user", "content": "hi"}]}).encode()
    with httpx.Client(base_url=proxy.url) as http:
        r = http.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.headers["x-optictx-fallback"].startswith("budget: ")
    assert upstream.last("/v1/chat/completions").raw == raw  # never worse than no proxy


def test_a_slow_upstream_is_a_504_after_the_timeout(upstream):
    upstream.delay = 2.0
    p = Proxy(ServeConfig(upstream=upstream.openai_url, upstream_timeout=0.3))
    try:
        with pytest.raises(openai.APIStatusError) as err:
            _openai(p).chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
        assert err.value.status_code == 504 and "in time" in str(err.value)
    finally:
        p.stop()


def test_a_turn_over_the_limits_goes_as_it_came_and_leaves_no_conversation(proxy, upstream):
    """The proxy cannot keep a turn over its limits, but the upstream may take it: it goes as it
    came, saying why, and nothing of it is stored."""
    huge = {"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 16_000_001}]}
    with httpx.Client(base_url=proxy.url, timeout=60) as http:
        r = http.post("/v1/chat/completions", json=huge, headers={"authorization": "Bearer key-a"})
    assert r.status_code == 200 and "max_turn_chars" in r.headers["x-optictx-fallback"]
    assert r.headers["x-optictx-fallback"].startswith("too-large: ")
    assert [a.body for a in upstream.arrivals] == [huge]
    assert proxy.proxy.ledger.conversations(_tenant("key-a")) == []


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serving(cmd: list[str], env: dict, port: int, ask) -> tuple[object, str]:
    """`cmd` run until `ask(port)` answers, then stopped with Ctrl-C: the answer and what it printed."""
    import signal
    import subprocess
    import time

    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = ask(port)
                break
            except (openai.APIConnectionError, httpx.TransportError):
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.2)
    finally:
        server.send_signal(signal.SIGINT)
        out, _ = server.communicate(timeout=30)
    assert server.returncode == 0, out
    return answer, out


def test_the_command_works_as_written_and_remembers_across_a_restart(upstream, sample, tmp_path):
    """`optictx serve --upstream URL` keeps its memories in the user's data directory by
    default (XDG_DATA_HOME here), says where on start, and a restart finds the conversation on
    the dashboard again; `--store :memory:` keeps nothing."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data")}
    port = _free_port()
    cmd = [sys.executable, "-m", "optictx", "serve", "--upstream", upstream.openai_url, "--host", "127.0.0.1",
           "--port", str(port), "--vision", "deepseek-ocr", "--budget", "3000"]

    def chat(port: int):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="key-a", max_retries=0)
        return client.chat.completions.with_raw_response.create(model="gpt-4o", messages=sample[:80])

    def listed(port: int):
        return httpx.get(f"http://127.0.0.1:{port}/optictx/api/conversations", timeout=10).json()["conversations"]

    r, out = _serving(cmd, env, port, chat)
    assert r.parse().choices[0].message.content == upstream.reply
    assert r.headers["x-optictx-vision"] == "deepseek-ocr"
    assert int(r.headers["x-optictx-tokens"].split("/")[0]) <= 3000
    store = tmp_path / "data" / "optictx" / "serve"
    assert f"memories kept in {store}" in out and (store / "optictx-serve.db").exists()
    again, _ = _serving(cmd, env, port, listed)
    assert [c["requests"] for c in again] == [1]  # the restart kept the dashboard's conversation
    gone, out = _serving([*cmd, "--store", ":memory:"], env, port, listed)
    assert gone == [] and "memories kept in nowhere" in out
    refused = subprocess.run([*cmd[:6], "--host", "0.0.0.0"], capture_output=True, text=True, timeout=60, env=env)
    assert refused.returncode == 2 and "allow-remote" in refused.stderr


def test_serve_with_no_argument_serves_both_apis_at_their_providers(tmp_path):
    """`optictx serve` alone: OpenAI's and Anthropic's public endpoints (nothing is sent here:
    the start says where it would), and a bad setting's error in the user's words, without
    pydantic's "Value error," prefix."""
    import os
    import sys

    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path)}
    port = _free_port()
    status, out = _serving([sys.executable, "-m", "optictx", "serve", "--port", str(port)], env, port,
                           lambda p: httpx.get(f"http://127.0.0.1:{p}/optictx/api/status", timeout=10).status_code)
    assert status == 200
    assert "OpenAI https://api.openai.com/v1" in out and "Anthropic https://api.anthropic.com" in out
    from optictx.errors import ConfigError
    from optictx.serve.config import ServeConfig as Config

    with pytest.raises(ConfigError) as err:
        Config.make(upstream="ftp://x")
    assert "Value error" not in str(err.value) and "must be an http:// or https:// URL" in str(err.value)


def test_a_stream_reaches_the_client_byte_for_byte_and_event_by_event(proxy, upstream, sample):
    from serve_peers import _anthropic_events, _openai_events

    for path, body, events in (
            ("/v1/chat/completions", {"model": "gpt-4o", "stream": True, "messages": sample[:60]},
             _openai_events("gpt-4o", upstream.reply)),
            ("/v1/messages", {"model": "claude-x", "max_tokens": 5, "stream": True,
                              "messages": [{"role": "user", "content": "hi"}]},
             _anthropic_events("claude-x", upstream.reply))):
        with httpx.Client(base_url=proxy.url) as http, http.stream("POST", path, json=body) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            chunks = list(r.iter_raw())
        assert b"".join(chunks) == b"".join(events)
        assert len(chunks) > 3  # relayed as they came, not gathered into one answer


def test_the_longest_known_prefix_is_found_in_one_query_per_500_messages():
    from optictx.serve.ledger import Ledger

    ledger = Ledger(None)
    digests = [i.to_bytes(4, "big") * 8 for i in range(1200)]
    ledger.new_conversation("c1", "t", None)
    ledger.extend("c1", digests[:1100], 0)
    assert ledger.longest(digests) == ("c1", 1100)  # found in the third chunk from the end
    assert ledger.longest([*digests[:700], b"x" * 32]) == ("c1", 700)
    assert ledger.longest([b"y" * 32]) is None


def test_pages_are_drawn_ahead_so_the_compaction_that_sends_them_draws_none(proxy, upstream, sample):
    client = _openai(proxy)
    roomy = {"x-optictx-budget": "100000"}  # it all fits: it goes as it came, no page sent
    first = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=sample[:150],
                                                            extra_headers=roomy)
    assert first.headers["x-optictx-event"] == "verbatim"
    proxy.proxy.drawahead.wait()  # what the proxy does while the upstream answers
    conv = proxy.proxy.conversations.find(proxy.proxy.tenant({"authorization": "Bearer key-a"}),
                                          first.headers["x-optictx-conversation"])
    sealed = [p for p in conv.memory.pages if p.sealed]
    drawn = conv.memory.images.renders
    assert sealed and drawn == len(sealed)  # each sealed page drawn once, ahead
    # Room for the tall pages this memory draws for gpt-4o (`cost.TILE_PRICED`, 425 tokens each).
    tight = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=sample[:150],
                                                            extra_headers={"x-optictx-budget": "6000"})
    assert tight.headers["x-optictx-event"] == "first" and _images_openai(upstream.last("/v1/chat/completions")
                                                                           .body["messages"])
    assert conv.memory.images.renders == drawn  # the compaction drew nothing on its request
