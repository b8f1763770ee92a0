"""The prompt-cache simulator against worked examples from the providers' documentation."""

from __future__ import annotations

import pytest

from optictx.errors import ConfigError
from optictx.promptcache import (
    CACHE_PRICING,
    Bill,
    Block,
    PromptCache,
    Request,
    get_cache_pricing,
    pricing_for,
    simulate,
)


def blocks(*sizes: int, marks: tuple[int, ...] = (), prefix: str = "b") -> tuple[Block, ...]:
    return tuple(Block(f"{prefix}{i}", n, i in marks) for i, n in enumerate(sizes))


def test_anthropic_large_context_example_writes_then_reads_the_marked_prefix():
    # Anthropic's "large context caching" example: a long system text with cache_control, then
    # a short question. The first call writes the system, the second reads it; the question
    # after the breakpoint bills at 1x both times.
    system = Block("book", 187_354, breakpoint=True)
    first = Request((system, Block("q1", 21)))
    second = Request((system, Block("q2", 25)), at=30)
    a, b = simulate([first, second], "anthropic")
    assert (a.written, a.read, a.uncached) == (187_354, 0, 21)
    assert (b.written, b.read, b.uncached) == (0, 187_354, 25)
    assert a.cost == pytest.approx(187_354 * 1.25 + 21)
    assert b.cost == pytest.approx(187_354 * 0.1 + 25)


def test_anthropic_a_prefix_shorter_than_the_minimum_is_not_cached():
    short = Request(blocks(500, 300, marks=(1,)))
    a, b = simulate([short, short], "anthropic")
    assert a == Bill(800, 0, 0, 800) and b == Bill(800, 0, 0, 800)
    # The same blocks cache on a model with a lower minimum.
    assert simulate([short, short], CACHE_PRICING["anthropic"].__class__(
        "low", 0.1, 1.25, "breakpoints", 100, 300.0))[1].read == 800


def test_anthropic_conversation_growth_reads_the_last_breakpoint_and_writes_the_new_turns():
    # Anthropic's multi-turn example: the breakpoint moves to the newest block on every call;
    # each call reads what the one before wrote and writes only what is new.
    turns = [2000, 300, 400, 500]
    bills = simulate([Request(blocks(*turns[: k + 1]), at=10 * k, automatic=True) for k in range(4)], "anthropic")
    assert [b.read for b in bills] == [0, 2000, 2300, 2700]
    assert [b.written for b in bills] == [2000, 300, 400, 500]


def test_anthropic_looks_back_at_most_20_blocks_before_a_breakpoint():
    # "The automatic prefix checking only looks back approximately 20 blocks": a breakpoint 25
    # blocks after the cached one misses it, unless another breakpoint sits within reach.
    base = [100] * 11
    first = Request(blocks(*base, marks=(10,)))
    grown = [*base, *[100] * 25]
    far = Request(blocks(*grown, marks=(35,)), at=1)
    near = Request(blocks(*grown, marks=(12, 35)), at=1)
    assert simulate([first, far], "anthropic")[1].read == 0
    assert simulate([first, near], "anthropic")[1].read == 1100


def test_anthropic_entries_live_five_minutes_from_their_last_use():
    r = lambda at: Request(blocks(2000, marks=(0,)), at=at)  # noqa: E731
    assert [b.read for b in simulate([r(0), r(299), r(598), r(899)], "anthropic")] == [0, 2000, 2000, 0]
    assert [b.read for b in simulate([r(0), r(900)], "anthropic-1h")] == [0, 2000]


def test_anthropic_refuses_more_than_four_breakpoints():
    with pytest.raises(ConfigError, match="allows 4"):
        PromptCache("anthropic").bill(Request(blocks(*[2000] * 5, marks=(0, 1, 2, 3, 4))))


def test_a_change_near_the_front_is_written_again_from_the_change_on():
    a = Request(blocks(3000, 800, 900, marks=(0, 2)))
    changed = Request((a.blocks[0], Block("edited", 800), Block("b2", 900, True)), at=1)
    bill = simulate([a, changed], "anthropic")[1]
    assert (bill.read, bill.written, bill.uncached) == (3000, 1700, 0)


def test_openai_caches_automatically_in_128_token_steps_from_1024():
    # OpenAI's guide shows a 2,006-token prompt sent again reporting cached_tokens: 1920.
    prompt = Request(blocks(2006))
    first, again = simulate([prompt, Request(prompt.blocks, at=5)], "openai:gpt-4o")
    assert (first.read, again.read, again.uncached) == (0, 1920, 86)
    assert again.cost == pytest.approx(1920 * 0.5 + 86)
    small = Request(blocks(1000))
    assert simulate([small, small], "openai:gpt-5")[1].read == 0
    grown = Request((*prompt.blocks, Block("new", 500)), at=5)
    assert simulate([prompt, grown], "openai:gpt-5")[1].read == 1920


def test_prefill_reuses_only_the_previous_prompt():
    a = Request(blocks(100, 200, 300))
    b = Request((*a.blocks[:2], Block("other", 50)))
    bills = simulate([a, b, a], "local")
    assert [x.cost for x in bills] == [600, 50, 300]


def test_registry_lookups_name_the_valid_choices():
    assert pricing_for("anthropic").name == "anthropic"
    assert pricing_for("openai:gpt-4.1-mini").read == 0.25
    assert pricing_for("openai:gpt-4o").read == 0.5
    assert pricing_for("deepseek-ocr").mode == "prefill"
    with pytest.raises(ConfigError, match="valid names: anthropic"):
        get_cache_pricing("anthropics")
    for p in CACHE_PRICING.values():
        assert p.source and 0 <= p.read < p.write <= 2


def test_dollars_come_from_genai_prices_with_the_cache_rates():
    pytest.importorskip("genai_prices", reason="genai-prices is in the serve extra")
    from optictx.money import dollars

    bill = Bill(uncached=400, read=500, written=100, cost=0)
    base = dollars(Bill(1_000_000, 0, 0, 0), "claude-opus-4-5", "anthropic")
    assert base == pytest.approx(5.0)  # $5 per million input tokens
    assert dollars(bill, "claude-opus-4-5", "anthropic") == pytest.approx((400 + 500 * 0.1 + 100 * 1.25) * 5e-6)
    assert dollars(bill, "no-such-model", "anthropic") is None
    assert dollars(bill, "deepseek-ocr", "local") is None
