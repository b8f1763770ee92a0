"""Hostile requests against the proxy: random JSON bodies, wrong types and shapes in every
field, to the three APIs. Each gets an answer in that API's own shape (a 400 naming what is wrong, or
the upstream's 200), never a 500, and a refused request stores nothing."""

from __future__ import annotations

import asyncio
import json

from conftest import needs
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

pytestmark = [needs("starlette", "serve"), needs("httpx", "serve")]

import httpx  # noqa: E402
import pytest  # noqa: E402

from optictx.serve import ServeConfig, create_app  # noqa: E402
from optictx.serve.conversations import tenant_of  # noqa: E402

from serve_peers import start_upstream, stop_upstream  # noqa: E402

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
roles = st.one_of(st.sampled_from(["user", "assistant", "user", "assistant", "system", "tool", "developer"]),
                  st.sampled_from(["wizard", 3, None]))
parts = st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", "image", "tool_use", "tool_result",
                                                    "thinking", "x"])},
                          optional={"text": json_values, "image_url": json_values, "source": json_values,
                                    "id": json_values, "input": json_values, "tool_use_id": json_values,
                                    "content": json_values}),
    json_values)
plain = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=60)})
hostile = st.fixed_dictionaries(
    {"role": roles},
    optional={"content": st.one_of(st.text(max_size=40), st.text(max_size=40), st.lists(parts, max_size=3),
                                   json_values),
              "tool_calls": st.one_of(json_values, st.lists(st.fixed_dictionaries(
                  {"id": json_values, "function": st.fixed_dictionaries({"name": json_values,
                                                                          "arguments": json_values})}),
                  max_size=2)),
              "tool_call_id": json_values, "name": json_values, "pinned": json_values})
messages = st.one_of(plain, plain, plain, hostile)
# Mostly the skeleton of a request, so that the fields inside it are reached; sometimes anything.
structured = st.fixed_dictionaries(
    {"model": st.sampled_from(["gpt-4o", "claude-x", "deepseek-ocr"]),
     "messages": st.lists(messages, min_size=1, max_size=5)},
    optional={"system": st.one_of(st.text(max_size=30), st.lists(parts, max_size=2), json_values),
              "stream": st.booleans(), "max_tokens": json_values, "tools": json_values})
# The Responses API's input items: messages, tool calls and outputs, reasoning, and anything.
items = st.one_of(
    plain,
    hostile,
    st.fixed_dictionaries({"type": st.sampled_from(["message", "function_call", "function_call_output", "reasoning",
                                                    "custom_tool_call", "local_shell_call_output", "web_search_call",
                                                    "item_reference", "compaction", "x"])},
                          optional={"role": roles,
                                    "content": st.one_of(st.text(max_size=30), st.lists(parts, max_size=2),
                                                         json_values),
                                    "call_id": st.one_of(st.text(max_size=6), json_values), "name": json_values,
                                    "arguments": json_values, "output": json_values, "input": json_values,
                                    "encrypted_content": json_values, "id": json_values}),
    json_values)
responses = st.fixed_dictionaries(
    {"model": st.sampled_from(["gpt-4o", "gpt-5-codex"]),
     "input": st.one_of(st.text(max_size=40), st.lists(items, min_size=1, max_size=5))},
    optional={"instructions": st.one_of(st.text(max_size=30), json_values), "stream": st.booleans(),
              "tools": json_values, "previous_response_id": st.one_of(st.none(), st.text(max_size=8)),
              "store": json_values})
broken = st.fixed_dictionaries({}, optional={"model": json_values, "messages": json_values, "system": json_values,
                                             "input": json_values})
bodies = st.one_of(json_values, broken, structured, structured, structured, responses, responses)
PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def served():
    state, server = start_upstream()
    app = create_app(ServeConfig(upstream=state.openai_url, anthropic_upstream=state.anthropic_url, budget=500,
                                 tenancy="per-key"))
    loop = asyncio.new_event_loop()  # one loop: the app's upstream client lives on it
    yield app, state, loop
    loop.close()
    stop_upstream(server)


async def _post(app, path: str, content: bytes) -> httpx.Response:
    transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 5000))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as client:
        return await client.post(path, content=content, headers={"authorization": "Bearer fuzz",
                                                                 "content-type": "application/json"})


@PROPS
@given(body=bodies, path=st.sampled_from(["/v1/chat/completions", "/v1/responses", "/v1/messages",
                                          "/v1/messages/count_tokens"]))
# Found by this test: a turn that went as it came said why in X-Optictx-Fallback, quoting its text,
# and a header is Latin-1 at most: the answer was a 500.
@example(body={"model": "gpt-4o", "messages": [{"role": "user", "content": ["\u0100"]}]}, path="/v1/chat/completions")
def test_any_body_gets_an_answer_in_the_apis_shape_and_a_refusal_stores_nothing(served, body, path):
    app, upstream, loop = served
    ledger = app.state.proxy.ledger
    before = len(ledger.conversations(tenant_of({"authorization": "Bearer fuzz"})))
    arrivals = len(upstream.arrivals)
    r = loop.run_until_complete(_post(app, path, json.dumps(body).encode()))
    assert r.status_code in (200, 400), (r.status_code, r.text[:300])
    event(f"{path} {r.status_code}")
    if r.status_code == 400:
        error = r.json()
        if path in ("/v1/chat/completions", "/v1/responses"):
            assert isinstance(error["error"]["message"], str) and error["error"]["type"]
        else:
            assert error["type"] == "error" and isinstance(error["error"]["message"], str)
        assert len(ledger.conversations(tenant_of({"authorization": "Bearer fuzz"}))) == before
        assert len(upstream.arrivals) == arrivals  # nothing went upstream either
