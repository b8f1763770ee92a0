"""Never refuse what the upstream would take: a request with fields, roles, content blocks or
items the proxy does not know is relayed, and what it does not understand reaches the upstream
as the client sent it, while the rest may be compressed. A property over random bodies of all
three APIs, through the proxy on 127.0.0.1 with a budget small enough that pages are made."""

from __future__ import annotations

import json
import uuid

import pytest
from conftest import needs
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

pytestmark = [needs("starlette", "serve"), needs("uvicorn", "serve"), needs("httpx", "serve")]

import httpx  # noqa: E402

from optictx.serve import ServeConfig  # noqa: E402
from optictx.serve.dialect import plain, unmarked  # noqa: E402

from serve_peers import Proxy, start_upstream, stop_upstream  # noqa: E402

PROPS = settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                        HealthCheck.function_scoped_fixture])
WORDS = ("the", "parser", "reads", "every", "token", "of", "the", "ledger", "and", "writes", "its", "totals", "back",
         "to", "disk")


class Served(tuple):
    def __repr__(self) -> str:  # hypothesis prints its arguments: not the upstream's megabytes
        return "served"


@pytest.fixture(scope="module")
def served():
    upstream, server = start_upstream()
    proxy = Proxy(ServeConfig(upstream=upstream.openai_url, anthropic_upstream=upstream.anthropic_url,
                              budget=100_000, keep_recent=2))
    yield Served((proxy, upstream))
    proxy.stop()
    stop_upstream(server)


def _text(n: int) -> str:
    return " ".join(WORDS[(n + i) % len(WORDS)] for i in range(120)) + f" (turn {n})"


ODD_FIELD = ("x_future", {"level": 3})
ODD_BLOCK = {"type": "x_future_block", "payload": "kept as it came"}


def _spread(odd: list[tuple[int, str]], turns: int) -> list[tuple[int, str]]:
    """The surprises at distinct exchanges, the latest first (an insertion then moves no later one)."""
    at = {n % turns: kind for n, kind in odd}
    return sorted(at.items(), reverse=True)


def _anthropic(turns: int, odd: list[tuple[int, str]]) -> tuple[dict, list]:
    """A body of `turns` exchanges (text, then tool use and result), with the surprises `odd`
    put at exchange i: a field on the body, on a message or a block, a block or a role unknown.
    Also the pieces that must reach the upstream exactly: ("body", key), ("message", m), ("block", b)."""
    messages, must = [{"role": "user", "content": "Count the ledger's totals."}], []
    for n in range(turns):
        tool = {"type": "tool_use", "id": f"t{n}", "name": "run", "input": {"n": n}}
        text = {"type": "text", "text": _text(n)}
        messages += [{"role": "assistant", "content": [text, tool]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{n}",
                                                   "content": _text(n + 1)}]},
                     {"role": "assistant", "content": _text(n + 2)}, {"role": "user", "content": "go on"}]
    for at, kind in _spread(odd, turns):
        i = 4 * at + 4  # a user text message ("go on") or the one before it
        if kind == "field":
            messages[i] = {**messages[i], ODD_FIELD[0]: ODD_FIELD[1]}
            must.append(("message", messages[i]))
        elif kind == "block":
            messages[i] = {"role": "user", "content": [{"type": "text", "text": "see this"}, ODD_BLOCK]}
            must.append(("block", ODD_BLOCK))
        elif kind == "role":
            messages.insert(i + 1, {"role": "narrator", "content": "meanwhile"})
            must.append(("message", messages[i + 1]))
        elif kind == "block-field":
            block = {"type": "text", "text": _text(at), "citations": []}
            messages[i - 1] = {"role": "assistant", "content": [block]}
            must.append(("block", block))
        elif kind == "system":
            messages.insert(i + 1, {"role": "system", "content": "Keep the todo list current."})
            must.append(("message", messages[i + 1]))
    body = {"model": "claude-sonnet-4-5", "max_tokens": 100, "system": "You count.", "messages": messages,
            ODD_FIELD[0]: ODD_FIELD[1]}
    return body, [*must, ("body", ODD_FIELD[0])]


def _openai(turns: int, odd: list[tuple[int, str]]) -> tuple[dict, list]:
    messages, must = [{"role": "system", "content": "You count."}, {"role": "user", "content": "Count."}], []
    for n in range(turns):
        messages += [{"role": "assistant", "content": _text(n), "tool_calls": [
            {"id": f"c{n}", "type": "function", "function": {"name": "run", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": _text(n + 1)},
            {"role": "assistant", "content": _text(n + 2)}, {"role": "user", "content": "go on"}]
    for at, kind in _spread(odd, turns):
        i = 4 * at + 5
        if kind == "field":
            messages[i] = {**messages[i], ODD_FIELD[0]: ODD_FIELD[1]}
        elif kind in ("block", "block-field"):
            messages[i] = {"role": "user", "content": [{"type": "text", "text": "hear this"},
                                                        {"type": "input_audio", "input_audio": {"data": "AAAA"}}]}
        elif kind == "role":
            messages.insert(i + 1, {"role": "narrator", "content": "meanwhile"})
            i += 1
        else:
            messages.insert(i + 1, {"role": "developer", "content": "Keep the todo list current."})
            i += 1
        must.append(("message", messages[i]))
    body = {"model": "gpt-4o", "messages": messages, ODD_FIELD[0]: ODD_FIELD[1]}
    return body, [*must, ("body", ODD_FIELD[0])]


def _responses(turns: int, odd: list[tuple[int, str]]) -> tuple[dict, list]:
    items, must = [{"role": "user", "content": [{"type": "input_text", "text": "Count."}]}], []
    for n in range(turns):
        items += [{"type": "function_call", "call_id": f"c{n}", "name": "run", "arguments": "{}"},
                  {"type": "function_call_output", "call_id": f"c{n}", "output": _text(n)},
                  {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": _text(n + 1)}]},
                  {"role": "user", "content": "go on"}]
    for at, kind in _spread(odd, turns):
        i = 4 * at + 4
        if kind == "field":
            items[i] = {**items[i], ODD_FIELD[0]: ODD_FIELD[1]}
        elif kind in ("block", "block-field"):
            items[i] = {"role": "user", "content": [{"type": "input_text", "text": "see"}, {"type": "input_file",
                                                                                          "file_id": "f1"}]}
        elif kind == "role":
            items.insert(i + 1, {"type": "x_future_item", "id": "xi_1", "detail": {"a": 1}})
            i += 1
        else:
            items.insert(i + 1, {"role": "developer", "content": "Keep the todo list current."})
            i += 1
        must.append(("message", items[i]))
    body = {"model": "gpt-4o", "input": items, ODD_FIELD[0]: ODD_FIELD[1]}
    return body, [*must, ("body", ODD_FIELD[0])]


APIS = {"anthropic": ("/v1/messages", "messages", _anthropic), "openai": ("/v1/chat/completions", "messages", _openai),
        "responses": ("/v1/responses", "input", _responses)}
SURPRISES = st.lists(st.tuples(st.integers(0, 100), st.sampled_from(["field", "block", "role", "block-field",
                                                                      "system"])), min_size=1, max_size=3)


def _said(message: dict) -> dict:
    """A message less the cache marks a proxy moves (`dialect.MARKERS`), one text block as its
    text: the proxy marks the last message it sends for the cache, whatever its role (a system
    message in place at the end of a conversation, hypothesis found)."""
    return plain({**message, "content": unmarked(message["content"])}) if "content" in message else message


def _blocks(messages: list) -> list:
    return [b for m in messages if isinstance(m, dict) and isinstance(m.get("content"), list) for b in m["content"]]


# A budget a page fits in beside the recent text: a Claude-sized page costs about 1,590 tokens, so
# at 3,000 every page was dropped and nothing was imaged (hypothesis found it: the example below).
@PROPS
@given(api=st.sampled_from(sorted(APIS)), turns=st.integers(16, 28), odd=SURPRISES)
@example(api="anthropic", turns=16, odd=[(15, "system")])  # a system message last: marked for the cache
@example(api="anthropic", turns=24, odd=[(0, "block-field"), (1, "block-field"), (2, "block-field")])
def test_what_the_proxy_does_not_know_reaches_the_upstream_as_it_came(served, api, turns, odd):
    proxy, upstream = served
    path, field, make = APIS[api]
    body, must = make(turns, odd)
    headers = {"x-api-key": "k"} if api == "anthropic" else {"authorization": "Bearer k"}
    headers |= {"x-optictx-conversation": uuid.uuid4().hex, "x-optictx-budget": "6000"}
    raw = json.dumps(body).encode()
    with upstream.lock:
        upstream.arrivals.clear()
    r = httpx.post(proxy.url + path, content=raw, headers={**headers, "content-type": "application/json"}, timeout=60)
    assert r.status_code == 200, r.text  # never refused
    [arrival] = upstream.arrivals
    got = arrival.body
    if arrival.raw == raw:  # sent as it came: everything reached the upstream unchanged
        event("sent as it came")
        return
    event("compressed")
    understood = all(kind == "system" for _, kind in _spread(odd, turns))  # a system message in place is known
    assert r.headers.get("x-optictx-fallback", "").startswith("kept-as-sent: ") != understood
    images = [b for b in _blocks(got[field]) if b.get("type") in ("image", "image_url", "input_image")]
    assert images, "the rest of the conversation was compressed"
    for kind, piece in must:
        if kind == "body":
            assert got[piece] == body[piece]
        elif kind == "message":  # where it was, saying what it said: a cache mark the proxy adds aside
            assert _said(piece) in [_said(m) for m in got[field]], piece
        else:
            assert piece in _blocks(got[field]), piece


@pytest.mark.parametrize("name", ["mcp__optictx__\nsearch", "mcp__optictx__search\x00", "s" * 70 + "recall"])
def test_a_tool_name_no_policy_takes_is_relayed_not_refused(served, name):
    """A tool that looks like ours (our description) but whose name holds a newline, a NUL or is
    too long got a 400 ("policy tools must be a tuple ..."): the upstream would take it, so the
    request goes, and the name is not taken for one of ours."""
    from optictx.tools import ABOUT

    proxy, upstream = served
    tools = [{"type": "function", "function": {"name": name, "description": ABOUT + " search the pages",
                                               "parameters": {"type": "object", "properties": {}}}}]
    r = httpx.post(proxy.url + "/v1/chat/completions", timeout=30, json={
        "model": "gpt-4o", "tools": tools, "messages": [{"role": "user", "content": _text(n)} for n in range(3)]})
    assert r.status_code == 200, r.text
    assert upstream.last("/v1/chat/completions").body["tools"] == tools
