"""Money at the request's own model's prices: the oracle is genai-prices' data (each model's
listed input, cache-read and cache-write prices) and Anthropic's documented cache rules, never
`optictx.money` itself."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from optictx import Memory
from optictx.promptcache import CACHE_PRICING, Bill

genai_prices = pytest.importorskip("genai_prices", reason="genai-prices is in the serve extra")

from optictx.money import dollars, for_model  # noqa: E402


def listed(model: str, provider: str):
    """A model's listed prices in genai-prices' data, per million tokens."""
    from genai_prices.data_snapshot import get_snapshot

    _, info = get_snapshot().find_provider_model(model, None, provider, None)
    prices = info.get_prices(datetime.now(timezone.utc))
    return _Base(prices)


class _Base:
    """A model's prices below any long-context tier (a request here is far under one)."""

    def __init__(self, prices) -> None:
        self.prices = prices

    def __getattr__(self, name: str):
        value = getattr(self.prices, name)
        return getattr(value, "base", value)


@pytest.mark.parametrize(("model", "family"), [
    ("claude-opus-5-5", "anthropic"), ("claude-sonnet-4-5", "anthropic"), ("claude-opus-4-8", "anthropic"),
    ("claude-haiku-4-5", "anthropic"), ("gpt-5", "openai:gpt-5"), ("gpt-4o", "openai:gpt-4o"),
    ("gpt-4.1", "openai:gpt-4.1")])
def test_a_model_s_cache_is_priced_at_its_own_listed_prices(model, family):
    p = listed(model, CACHE_PRICING[family].provider)
    rules = for_model(CACHE_PRICING[family], model)
    assert rules.model == model  # its own prices known
    assert rules.read == pytest.approx(float(p.cache_read_mtok / p.input_mtok), abs=1e-6)
    if rules.mode == "breakpoints":
        assert rules.write == pytest.approx(float(p.cache_write_mtok / p.input_mtok), abs=1e-6)
        hour = for_model(CACHE_PRICING[family], model, "1h")
        assert hour.write == pytest.approx(float(p.cache_write_1h_mtok / p.input_mtok), abs=1e-6)
        assert hour.ttl == 3600 and hour.read == rules.read
    else:  # OpenAI bills no write: what is not read is input
        assert rules.write == 1.0
    assert (rules.mode, rules.min_tokens, rules.lookback) == (CACHE_PRICING[family].mode,
                                                              CACHE_PRICING[family].min_tokens,
                                                              CACHE_PRICING[family].lookback)


def test_claude_opus_5_5_reads_its_cache_at_a_twentieth():
    """The case the dashboard got wrong: 0.05x, not the family's 0.1x (its listed $0.20 against $4)."""
    p = listed("claude-opus-5-5", "anthropic")
    assert (float(p.input_mtok), float(p.cache_read_mtok)) == (4.0, pytest.approx(0.2))
    assert for_model(CACHE_PRICING["anthropic"], "claude-opus-5-5").read == pytest.approx(0.05)


def test_an_unknown_model_falls_back_to_its_family_and_says_so():
    rules = for_model(CACHE_PRICING["anthropic"], "claude-nobody-knows-9")
    assert rules.model is None  # not known: the family stands in
    assert (rules.read, rules.write) == (0.1, 1.25)
    assert for_model(CACHE_PRICING["anthropic"], "claude-nobody-knows-9", "1h").write == 2.0
    assert for_model(CACHE_PRICING["local"], "deepseek-ocr") == CACHE_PRICING["local"]


def test_dollars_price_each_kind_of_token_at_the_model_s_listed_price():
    p = listed("claude-opus-5-5", "anthropic")
    bill = Bill(uncached=1000, read=20_000, written=3000, cost=0, written_1h=1000)
    expected = (1000 * p.input_mtok + 20_000 * p.cache_read_mtok + 2000 * p.cache_write_mtok
                + 1000 * p.cache_write_1h_mtok) / 1_000_000
    assert dollars(bill, "claude-opus-5-5", CACHE_PRICING["anthropic"]) == pytest.approx(float(expected))


def test_the_meter_prices_an_opus_5_5_request_as_its_invoice_would():
    """Two requests of one conversation, the second warm: Anthropic reads the first back at the
    model's read price and writes the rest; in dollars, what genai-prices lists for those counts."""
    from optictx.serve.meter import Meter

    meter = Meter()
    first = meter.charge(None, 20_000, 20_000, "anthropic", "claude-opus-5-5", at=0.0)
    second = meter.charge(None, 21_000, 21_000, "anthropic", "claude-opus-5-5", at=60.0)
    p = listed("claude-opus-5-5", "anthropic")
    assert first.passthrough_usd == pytest.approx(float(20_000 * p.cache_write_mtok) / 1e6)
    assert second.passthrough_usd == pytest.approx(float(20_000 * p.cache_read_mtok + 1000 * p.cache_write_mtok) / 1e6)
    assert first.prices is None and second.prices is None  # the model's own, not an estimate
    unknown = Meter().charge(None, 20_000, 20_000, "anthropic", "claude-nobody-knows-9", at=0.0)
    assert unknown.prices == "anthropic family's" and unknown.passthrough_usd is None


def test_the_upstream_s_one_hour_writes_are_priced_as_such():
    from optictx.serve.meter import usage_of, usage_record

    answer = {"usage": {"input_tokens": 10, "cache_read_input_tokens": 5000, "cache_creation_input_tokens": 3000,
                        "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 2000},
                        "output_tokens": 5}}
    usage = usage_of("anthropic", answer)
    assert usage is not None and usage.cache_write_1h == 2000
    record = usage_record(usage, "anthropic", "claude-sonnet-4-5", most=100_000)
    p = listed("claude-sonnet-4-5", "anthropic")
    expected = (10 * p.input_mtok + 5000 * p.cache_read_mtok + 1000 * p.cache_write_mtok
                + 2000 * p.cache_write_1h_mtok) / 1_000_000
    assert record["billed_usd"] == pytest.approx(float(expected))
    assert record["billed"] == pytest.approx(float(expected / p.input_mtok) * 1_000_000)


def _paid(sample, model: str) -> tuple[int, list[str]]:
    """Paid compactions over the sample grown a turn a call at a tight budget, deciding at `model`'s
    prices; and the events."""
    mem = Memory(vision="anthropic", budget=30_000, keep_recent=4)
    pricing = for_model(CACHE_PRICING["anthropic"], model)
    events = []
    for i, m in enumerate(sample):
        mem.add(m)
        if m["role"] == "user" or i % 3 == 0:
            events.append(mem.context(at=1000.0 + 10 * i, pricing=pricing).event)
    return events.count("paid"), events


def test_a_cheaper_read_makes_a_compaction_pay_less_often(sample):
    """A compaction pays by what it saves on every later read: at half the read price it saves
    half, against the same write, so it is taken no more often, and here less."""
    dear, _ = _paid(sample, "claude-sonnet-4-5")  # reads at 0.1x
    cheap, _ = _paid(sample, "claude-opus-5-5")  # 0.05x
    assert cheap < dear
