"""Money: what a model's provider charges for its prompt's tokens, read from its cache, written
to it and not cached, at that model's own prices.

The cache's mechanics (breakpoints or automatic, minimum prefix, lifetime, lookback) are the
provider family's (`promptcache.CACHE_PRICING`); its prices are the model's, from genai-prices'
bundled data (offline): Claude Opus 5.5 reads its cache at 0.05x its input price where older
Claude models read at 0.1x, and a plan or a bill made at the family's multipliers is wrong by
that much. The family's multipliers stand in only where genai-prices does not know the model (or
is not installed), and `CachePricing.model` then says so (None).
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Literal

from .promptcache import HOUR, Bill, CachePricing, get_cache_pricing

TTL = Literal["5m", "1h"]
# The prompt size a model's multipliers are read at: genai-prices applies a long-context tier to
# the whole request, and the cache multipliers on top of it (the same ratios at 300k tokens, seen
# for Claude Sonnet 4.5 and gpt-5.5), so one size gives them.
_AT = 100_000


def for_model(pricing: CachePricing, model: str | None, ttl: TTL = "5m") -> CachePricing:
    """`pricing`'s mechanics at `model`'s own read and write prices, as multipliers on its
    uncached input price, with `"ttl": "1h"` writes (their price and lifetime) where `ttl` asks;
    the family's multipliers where the model's prices are not known (`CachePricing.model` None).

    >>> from optictx.promptcache import CACHE_PRICING
    >>> for_model(CACHE_PRICING["anthropic"], "claude-opus-5-5").read  # doctest: +SKIP
    0.05"""
    rates = _rates(pricing.provider, model) if model else None
    if rates is None:
        return replace(pricing, write=pricing.write_1h, ttl=HOUR) if ttl == "1h" and pricing.write_1h else pricing
    read, write, write_1h = rates
    if ttl == "1h" and pricing.mode == "breakpoints":
        return replace(pricing, read=read, write=write_1h, write_1h=write_1h, ttl=HOUR, model=model)
    return replace(pricing, read=read, write=write if pricing.mode == "breakpoints" else pricing.write,
                   write_1h=write_1h, model=model)


def dollars(bill: Bill, model: str, pricing: str | CachePricing) -> float | None:
    """The bill's input in US dollars for `model` at its own prices (genai-prices' bundled data),
    its 1-hour writes (`Bill.written_1h`) at the 1-hour price; None when genai-prices is not
    installed or does not know the model. `pricing` names the provider."""
    provider = get_cache_pricing(pricing).provider
    return _input_usd(provider, model, bill.tokens, bill.read, bill.written, min(bill.written_1h, bill.written))


def _input_usd(provider: str | None, model: str, tokens: int, read: int, written: int, written_1h: int
               ) -> float | None:
    if provider is None or not model:
        return None
    try:
        from genai_prices import Usage, calc_price
    except ImportError:
        return None
    try:
        price = calc_price(Usage(input_tokens=tokens, cache_read_tokens=read, cache_write_tokens=written,
                                 cache_write_1h_tokens=written_1h), model_ref=model, provider_id=provider)
    except LookupError:
        return None
    return float(price.input_price)


@lru_cache(maxsize=512)
def _rates(provider: str | None, model: str) -> tuple[float, float, float] | None:
    """`model`'s cache read, 5-minute write and 1-hour write prices over its input price."""
    base = _input_usd(provider, model, _AT, 0, 0, 0)
    if not base:
        return None
    read = _input_usd(provider, model, _AT, _AT, 0, 0)
    write = _input_usd(provider, model, _AT, 0, _AT, 0)
    hour = _input_usd(provider, model, _AT, 0, _AT, _AT)
    if read is None or write is None or hour is None:
        return None
    return round(read / base, 6), round(write / base, 6), round(hour / base, 6)
