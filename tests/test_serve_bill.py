"""The proxy speaks the bill: one Claude Code session is one memory however its cache marks move,
tools and system count, the upstream's usage is recorded (streamed and not), the task survives a
tight budget, and each answer says its modeled cost beside the conversation's as it came."""

from __future__ import annotations

import time

import pytest
from conftest import needs

pytestmark = [needs("starlette", "serve"), needs("uvicorn", "serve"), needs("httpx", "serve")]

from optictx.serve import ServeConfig  # noqa: E402
from optictx.serve.conversations import tenant_of  # noqa: E402

from serve_peers import Proxy, to_anthropic_messages  # noqa: E402

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")
EPHEMERAL = {"type": "ephemeral"}


def _proxy(upstream, **kw):
    return Proxy(ServeConfig(upstream=upstream.openai_url, anthropic_upstream=upstream.anthropic_url,
                             **{"tenancy": "per-key", **kw}))


@pytest.fixture()
def proxy(upstream):
    p = _proxy(upstream, budget=6000, keep_recent=4)
    yield p
    p.stop()


def _calls(sample, first, count):
    """Request sizes as an agent makes them: each request ends where an assistant turn follows."""
    return [n for n in range(first, len(sample))
            if sample[n]["role"] == "assistant" and sample[n - 1]["role"] != "assistant"][:count]


def _anthropic_history(sample, n):
    """The sample's first n messages as Claude Code sends them: the system and newest block marked."""
    system, messages = to_anthropic_messages(sample[:n])
    last = messages[-1]["content"]
    last[-1] = {**last[-1], "cache_control": EPHEMERAL}
    return [{"type": "text", "text": system, "cache_control": EPHEMERAL}], messages


def _claude_code(proxy, key, sample, first, count):
    """The answers (raw) to `count` requests as Claude Code makes them, from `first` messages on."""
    client = anthropic.Anthropic(base_url=proxy.url, api_key=key, max_retries=0)
    for n in _calls(sample, first, count):
        system, messages = _anthropic_history(sample, n)
        yield client.messages.with_raw_response.create(model="claude-sonnet-4-5", max_tokens=50, system=system,
                                                       messages=messages)


def test_a_moving_cache_control_keeps_one_conversation(proxy, upstream, sample):
    events = []
    for raw in _claude_code(proxy, "key-a", sample, 60, 10):
        events.append(raw.headers["x-optictx-event"])
        body = upstream.last("/v1/messages").body
        marks = [b for b in [*body["system"], *(b for m in body["messages"] for b in m["content"])]
                 if "cache_control" in b]
        assert len(marks) <= 4
    conversations = proxy.proxy.ledger.conversations(tenant_of({"x-api-key": "key-a"}))
    assert [c["requests"] for c in conversations] == [10]  # one memory, never forked
    assert events.count("append") >= 5, events


def test_tools_and_the_system_prompt_count_in_the_figures_and_the_budget(proxy, upstream, sample):
    tools = [{"type": "function", "function": {"name": f"tool_{i}", "description": "does a thing " * 40,
                                               "parameters": {"type": "object", "properties": {}}}}
             for i in range(12)]
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="key-a", max_retries=0)
    bare = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=sample[:6])
    withtools = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=sample[:6], tools=tools,
                                                                 extra_headers={"x-optictx-conversation": "t"})
    sent0, original0 = map(int, bare.headers["x-optictx-tokens"].split("/"))
    sent1, original1 = map(int, withtools.headers["x-optictx-tokens"].split("/"))
    assert original1 - original0 > 12 * 40 and sent1 - sent0 == original1 - original0
    # Tools larger than the budget: the request goes as it came, and says so.
    tight = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=sample[:6], tools=tools, extra_headers={"x-optictx-budget": "300"})
    assert tight.headers["x-optictx-fallback"].startswith("budget: ")


@pytest.mark.parametrize("stream", [False, True])
def test_the_upstreams_usage_is_recorded_with_its_bill(proxy, upstream, sample, stream):
    a = anthropic.Anthropic(base_url=proxy.url, api_key="key-u", max_retries=0)
    o = openai.OpenAI(base_url=proxy.url + "/v1", api_key="key-u", max_retries=0)
    system, messages = _anthropic_history(sample, _calls(sample, 40, 1)[0])
    if stream:
        with a.messages.stream(model="claude-sonnet-4-5", max_tokens=50, system=system, messages=messages) as s:
            "".join(s.text_stream)
        for _ in o.chat.completions.create(model="gpt-4o", messages=sample[:30], stream=True,
                                           stream_options={"include_usage": True}):
            pass
    else:
        a.messages.create(model="claude-sonnet-4-5", max_tokens=50, system=system, messages=messages)
        o.chat.completions.create(model="gpt-4o", messages=sample[:30])
    ledger = proxy.proxy.ledger
    tenant = tenant_of({"x-api-key": "key-u"})
    for _ in range(100):  # a stream's row is written once it has ended, just after the client read it
        rows = {r["api"]: r for c in ledger.conversations(tenant) for r in ledger.requests(tenant, c["id"])}
        if len(rows) == 2:
            break
        time.sleep(0.05)
    assert rows["anthropic"]["usage"] == {"input": 7, "cache_read": 2000, "cache_write": 300, "output": 11}
    assert rows["anthropic"]["billed"] == pytest.approx(7 + 0.1 * 2000 + 1.25 * 300)
    assert rows["openai"]["usage"] == {"input": 180, "cache_read": 1920, "cache_write": 0, "output": 11}
    assert rows["openai"]["billed"] == pytest.approx(180 + 0.5 * 1920)  # gpt-4o reads at half price
    for r in rows.values():
        assert r["cost"] is not None and r["passthrough"] is not None and r["event"]
    if _has_prices():
        assert rows["anthropic"]["billed_usd"] > 0 and rows["anthropic"]["cost_usd"] > 0


def _has_prices() -> bool:
    try:
        import genai_prices  # noqa: F401
    except ImportError:
        return False
    return True


def test_the_task_survives_a_tight_budget(upstream, sample):
    task = "TASK-7731: make the invoice totals exact to the cent and keep the API unchanged."
    history = [sample[0], {"role": "user", "content": task}, *sample[2:200]]
    for pin, survives in ((True, True), (False, False)):
        p = _proxy(upstream, budget=2500, keep_recent=2, pin_task=pin, words=False)  # the pin alone
        try:
            client = openai.OpenAI(base_url=p.url + "/v1", api_key=f"key-{pin}", max_retries=0)
            client.chat.completions.create(model="deepseek-ocr", messages=history)
            sent = upstream.last("/v1/chat/completions").body["messages"]
            assert any(m.get("content") == task for m in sent) is survives
        finally:
            p.stop()


def test_each_answer_says_its_modeled_cost_beside_the_conversation_as_it_came(proxy, upstream, sample):
    """The oracle is Anthropic's published multipliers (a cache write 1.25x, a read 0.1x), applied
    to the request sizes the proxy reports: the first request writes all of it; each later one
    reads the one before back and writes the rest. Sent as it came (it fits), both sides agree."""
    costs = []
    for raw in _claude_code(proxy, "key-c", sample, 30, 3):
        ours, theirs = raw.headers["x-optictx-cost"].split(";")[0].split("/")
        costs.append((float(ours), float(theirs), int(raw.headers["x-optictx-tokens"].split("/")[1])))
    sizes = [0] + [size for _, _, size in costs]
    for (ours, theirs, size), before in zip(costs, sizes):
        assert theirs == pytest.approx(0.1 * before + 1.25 * (size - before), abs=1)  # the header rounds
        assert ours == pytest.approx(theirs)


@pytest.mark.parametrize("api", ["anthropic", "openai", "responses"])
def test_the_upstream_body_is_json_dumps_byte_for_byte(sample, api, monkeypatch):
    """Pages are spliced into the body rather than encoded again, in every dialect: the bytes are
    still exactly what `json.dumps` writes of the body with the pages in it, whatever the
    client's own text holds."""
    import json

    from optictx import Budget, Memory
    from optictx.export import to_anthropic, to_openai, to_responses
    from optictx.serve.body import Splice

    mem = Memory(budget=Budget(tokens=6000), keep_recent=4, vision="anthropic")
    for m in sample[:200]:
        mem.add(m)
    ctx = mem.context()
    export, key = {"anthropic": (lambda **kw: to_anthropic(ctx, cache=True, **kw)[1], "messages"),
                   "openai": (lambda **kw: to_openai(ctx, **kw), "messages"),
                   "responses": (lambda **kw: to_responses(ctx, **kw), "input")}[api]
    tricky = {"role": "user", "content": [{"type": "text", "text": 'optictx-page-0 "quoted" \\ \u00e9 \ud83d\ude00'}]}
    splice = Splice()
    held = {"model": "m", "max_tokens": 5, key: [*export(image=splice.hold), tricky]}
    plain = {"model": "m", "max_tokens": 5, key: [*export(), tricky]}
    pages = [p.image.image_base64() for p in ctx.pieces if p.image is not None]
    real, encoded = json.dumps, []
    monkeypatch.setattr(json, "dumps", lambda obj: encoded.append(real(obj)) or encoded[-1])
    assert pages and splice.dumps(held) == real(plain).encode()
    assert len(encoded[0]) < sum(map(len, pages))  # what was encoded held placeholders, not the pages


def test_the_modeled_bill_counts_a_cold_cache_both_ways(sample):
    """`X-Optictx-Cost` models the provider's cache with the requests' times: a request after the
    cache's lifetime reads nothing back, sent as it came or through optictx."""
    from optictx import Memory
    from optictx.prefix import tokens_per_piece
    from optictx.serve.meter import Meter

    mem, meter, charges = Memory(budget=128_000, keep_recent=4, vision="anthropic"), Meter(), []
    for at, upto in ((100.0, 60), (160.0, 70), (1000.0, 80)):
        for m in sample[len(mem):upto]:
            mem.add(m)
        ctx, original = mem.context(at=at), mem.original_tokens()
        charges.append((meter.charge(ctx, original, ctx.tokens, "anthropic", "claude-sonnet-4-5", at), original, ctx))
    (first, o1, _), (warm, o2, _), (cold, o3, ctx) = charges
    assert first.passthrough == pytest.approx(1.25 * o1)  # nothing to read yet
    assert warm.passthrough < 0.5 * o2  # the first request's prefix read back at a tenth
    assert cold.passthrough == pytest.approx(1.25 * o3)  # 840 s later: written again, all of it
    assert cold.optictx == pytest.approx(1.25 * sum(tokens_per_piece(ctx)))
    assert (first.why, warm.why, cold.why) == (None, None, "cold cache")


def test_a_client_that_changes_its_tools_breaks_its_own_prefix_both_ways(proxy, upstream, sample):
    """Tools go before the messages: a client that adds one rewrites everything after it, as it
    came and through optictx alike (nothing read back on either side), and the request says why."""
    tools = [{"name": f"tool_{i}", "description": "does a thing", "input_schema": {"type": "object"}}
             for i in range(3)]
    client = anthropic.Anthropic(base_url=proxy.url, api_key="key-t", max_retries=0)
    costs = []
    for n, given in ((40, tools), (44, tools), (48, [*tools, {**tools[0], "name": "tool_new"}])):
        system, messages = _anthropic_history(sample, n)
        raw = client.messages.with_raw_response.create(model="claude-sonnet-4-5", max_tokens=50, system=system,
                                                       messages=messages, tools=given)
        ours, theirs = map(float, raw.headers["x-optictx-cost"].split(";")[0].split("/"))
        costs.append((ours, theirs, int(raw.headers["x-optictx-tokens"].split("/")[1])))
    tenant = tenant_of({"x-api-key": "key-t"})
    [conv] = proxy.proxy.ledger.conversations(tenant)
    assert [r["why"] for r in proxy.proxy.ledger.requests(tenant, conv["id"])] == [
        None, None, "the client changed its tools or system prompt"]
    (_, warm, second), (_, theirs, third) = costs[1], costs[2]
    assert warm < 0.5 * second  # the second read the first back
    assert theirs == pytest.approx(1.25 * third, abs=1)  # the third wrote it all again (the header rounds)


def test_dollars_are_priced_at_the_requests_own_size():
    """A request of 20,000 tokens is priced at the standard tier, whatever a million tokens cost:
    the oracle is genai-prices itself, asked about a request of that size."""
    genai_prices = pytest.importorskip("genai_prices")
    from optictx.serve.meter import Meter

    charge = Meter().charge(None, 20_000, 20_000, "anthropic", "claude-sonnet-4-5", at=0.0)
    price = genai_prices.calc_price(genai_prices.Usage(input_tokens=20_000), model_ref="claude-sonnet-4-5",
                                    provider_id="anthropic")
    per_token = float(price.input_price) / 20_000
    assert charge.passthrough_usd == pytest.approx(per_token * charge.passthrough)
    big = genai_prices.calc_price(genai_prices.Usage(input_tokens=1_000_000), model_ref="claude-sonnet-4-5",
                                  provider_id="anthropic")
    assert float(big.input_price) / 1_000_000 > per_token * 1.5  # the tier the old pricing put every request in


def _compressed(sample):
    """Two compressed contexts of one conversation, the second four turns on."""
    from optictx import Memory

    mem = Memory(vision="anthropic", budget=3000, keep_recent=2)
    for m in sample[:80]:
        mem.add(m)
    first = mem.context()
    for m in sample[80:84]:
        mem.add(m)
    return first, mem.context()


def test_tools_cost_the_same_on_both_sides_of_a_compressed_request(sample):
    """A request's tool definitions go as they came either way: on a compressed request they add
    to optictx's modeled cost what they add to the conversation's as it came (cold and warm)."""
    from optictx.serve.meter import Meter

    first, second = _compressed(sample)
    assert not first.verbatim and not second.verbatim
    tools = 4_000
    costs = []
    for extra in (0, tools):
        meter = Meter()
        costs.append([meter.charge(ctx, original + extra, ctx.tokens + extra, "anthropic", "claude-sonnet-4-5", at)
                      for ctx, original, at in ((first, 20_000, 0.0), (second, 21_000, 60.0))])
    for without, with_tools in zip(*costs):
        assert with_tools.optictx - without.optictx == pytest.approx(with_tools.passthrough - without.passthrough)


def test_instructions_drawn_cost_what_went(sample):
    """With `--image-instructions` a request counts `moved` tokens fewer than its context does
    (its instructions went as pages): on a compressed request the cold call costs those tokens'
    write less and the warm one their read less (they are in front, read back unchanged); sent
    as it came but for them, a request costs what it sent, not what it came as."""
    from optictx import Memory
    from optictx.promptcache import pricing_for
    from optictx.serve.meter import Meter

    first, second = _compressed(sample)
    pricing, moved = pricing_for("anthropic"), 500  # what is left stays above the cache's least prompt
    for tools in (0, 4_000):  # with no tools, more is drawn than the tools' own tokens
        costs = []
        for fewer in (0, moved):
            meter = Meter()
            costs.append([meter.charge(ctx, original + tools, ctx.tokens + tools - fewer, "anthropic",
                                       "claude-sonnet-4-5", at)
                          for ctx, original, at in ((first, 20_000, 0.0), (second, 21_000, 60.0))])
        (cold, warm), (cold_drawn, warm_drawn) = costs
        assert cold.optictx - cold_drawn.optictx == pytest.approx(moved * pricing.write)
        assert warm.optictx - warm_drawn.optictx == pytest.approx(moved * pricing.read)
        assert (cold.passthrough, warm.passthrough) == (cold_drawn.passthrough, warm_drawn.passthrough)
    tools = 4_000
    small = Memory(vision="anthropic", budget=100_000)
    for m in sample[:10]:
        small.add(m)
    as_it_came = small.context()
    assert as_it_came.verbatim
    meter, size = Meter(), as_it_came.tokens + tools
    charge = meter.charge(as_it_came, size, size - moved, "anthropic", "claude-sonnet-4-5", 0.0)
    assert charge.optictx == pytest.approx(charge.passthrough - moved * pricing.write)
