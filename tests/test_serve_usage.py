"""Money and records that cannot be poisoned: the usage an upstream reports is taken as fact only
when it is whole, non-negative and no larger than the request could have carried (cached never
above the prompt, a bool never a number); otherwise the request's record is kept and says the
usage is not known. One answer can never hide the dashboard, and a ledger already holding such
rows reads without an error. Streamed usage is read per SSE event, whatever its line structure."""

from __future__ import annotations

import json
import math

import pytest
from conftest import needs

pytestmark = [needs("starlette", "serve"), needs("uvicorn", "serve")]
openai = pytest.importorskip("openai")

from optictx.serve import ServeConfig  # noqa: E402
from optictx.serve.conversations import tenant_of  # noqa: E402

from serve_peers import Proxy  # noqa: E402

MESSAGES = [{"role": "user", "content": "What is the total of invoice 7?"}]
HUGE = "1" + "0" * 400  # a JSON integer no float holds

# (the usage an OpenAI answer reports, as JSON text): each must be recorded as not known
POISONED = [
    '{"prompt_tokens": 1e308, "completion_tokens": 1}',
    f'{{"prompt_tokens": {10**308}, "completion_tokens": 1}}',
    f'{{"prompt_tokens": {HUGE}, "completion_tokens": 1}}',
    '{"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": -5}}',
    '{"prompt_tokens": 1000000000000, "completion_tokens": 1}',
    '{"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 1000000000}}',
    '{"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 11}}',
    '{"prompt_tokens": true, "completion_tokens": true}',
    '{"prompt_tokens": -3, "completion_tokens": 1}',
    '{"prompt_tokens": 90000, "completion_tokens": 1}',  # a 200-byte request carries no 90,000 tokens
    '{"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": "lots"}',  # as Anthropic's: doubted
]


def _answer(usage: str) -> bytes:
    return ('{"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o", "choices": '
            '[{"index": 0, "message": {"role": "assistant", "content": "42"}, "finish_reason": "stop"}], '
            f'"usage": {usage}}}').encode()


def _rows(proxy: Proxy) -> tuple[list[dict], list[dict]]:
    tenant = tenant_of({}, personal=True)
    conversations = proxy.proxy.ledger.conversations(tenant)
    return conversations, proxy.proxy.ledger.requests(tenant, conversations[0]["id"]) if conversations else []


@pytest.mark.parametrize("usage", POISONED)
def test_usage_no_request_could_carry_is_recorded_as_not_known(upstream, usage):
    import httpx

    proxy = Proxy(ServeConfig(upstream=upstream.openai_url))
    try:
        upstream.whole_body = _answer(usage)
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="key-a", max_retries=0)
        for _ in range(2):  # two rows: their sums would be infinite
            assert client.chat.completions.create(model="gpt-4o", messages=MESSAGES).choices[0].message.content == "42"
        conversations, requests = _rows(proxy)
        assert len(requests) == 2, "every answered request keeps its record"
        for r in requests:
            assert r["billed"] is None and r["billed_usd"] is None, "never priced as fact"
            assert r["usage"] is not None and r["usage"].get("doubt"), "the record says why it is not known"
        listed = httpx.get(proxy.url + "/optictx/api/conversations", timeout=10)
        assert listed.status_code == 200
        assert all(v is None or math.isfinite(v) for c in listed.json()["conversations"] for v in c.values()
                   if isinstance(v, float))
    finally:
        proxy.stop()


def test_plausible_usage_is_recorded_and_priced(upstream):
    proxy = Proxy(ServeConfig(upstream=upstream.openai_url))
    try:
        upstream.whole_body = _answer('{"prompt_tokens": 30, "completion_tokens": 1, '
                                      '"prompt_tokens_details": {"cached_tokens": 0}}')
        openai.OpenAI(base_url=proxy.url + "/v1", api_key="key-a", max_retries=0).chat.completions.create(
            model="gpt-4o", messages=MESSAGES)
        [r] = _rows(proxy)[1]
        assert r["usage"] == {"input": 30, "cache_read": 0, "cache_write": 0, "output": 1} and r["billed"] == 30
    finally:
        proxy.stop()


@pytest.mark.parametrize("where", ["sqlite", "postgres"])
def test_a_ledger_already_holding_absurd_rows_reads_without_an_error(tmp_path, request, where):
    from optictx.serve.ledger import Ledger, Sent

    url = tmp_path / "serve" if where == "sqlite" else (pg := request.getfixturevalue("pg")).url(pg.database())
    ledger = Ledger(url)
    try:
        ledger.new_conversation("c1", "t1", "chat")
        for _ in range(3):  # as an older optictx wrote them: 1e308 three times sums past a float
            ledger.record(Sent("c1", "t1", "openai", "gpt-4o", "openai:gpt-4o", 3, 900, 300, False, {}, 200,
                               cost=1e308, passthrough=1e308, billed=1e308, cost_usd=1e308, billed_usd=1e308))
        ledger.record(Sent("c1", "t1", "openai", "gpt-4o", "openai:gpt-4o", 3, 900, 300, False, {}, 200,
                           cost=10.0, passthrough=20.0, billed=12.0))
        [row] = ledger.conversations("t1")
        json.dumps(row, allow_nan=False)  # what the dashboard sends: no inf, no NaN
        assert row["requests"] == 4 and row["cost"] == 10.0 and row["billed"] == 12.0  # the absurd left out
        assert all(json.dumps(r, allow_nan=False) for r in ledger.requests("t1", "c1"))
    finally:
        ledger.close() if hasattr(ledger, "close") else None


def test_usage_split_over_two_data_lines_of_one_event_is_read(upstream):
    """SSE lets one event's data span lines (joined with a newline): valid JSON either way."""
    proxy = Proxy(ServeConfig(upstream=upstream.openai_url))
    try:
        chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
                 "choices": [{"index": 0, "delta": {"content": "42"}, "finish_reason": None}]}
        usage = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o", "choices": [],
                 "usage": {"prompt_tokens": 25, "completion_tokens": 1}}
        split = json.dumps(usage, indent=1).split("\n")
        upstream.stream_body = (b"data: " + json.dumps(chunk).encode() + b"\n\n"
                                + b"".join(b"data: " + line.encode() + b"\n" for line in split) + b"\n"
                                + b"data: [DONE]\n\n")
        stream = openai.OpenAI(base_url=proxy.url + "/v1", api_key="key-a", max_retries=0).chat.completions.create(
            model="gpt-4o", messages=MESSAGES, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "42"
        for _ in range(100):
            requests = _rows(proxy)[1]
            if requests:
                break
            import time

            time.sleep(0.05)
        assert requests[0]["usage"] == {"input": 25, "cache_read": 0, "cache_write": 0, "output": 1}
    finally:
        proxy.stop()
