"""Prompt caching: how each provider bills a repeated prompt prefix, and a simulator that prices
a sequence of requests under those rules.

Prices here are multipliers on the model's base input price (a cache read at 0.1x costs a tenth
of an uncached token). The registry holds each provider family's mechanics (breakpoints, lookback,
lifetime, minimum length, hit granularity), one line per family with the page it was read from
and the date, and the family's usual multipliers; a model's own prices replace those
(`money.for_model`), and money per token is `money.py`'s.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from .cost import PROFILES
from .errors import ConfigError

Mode = Literal["breakpoints", "automatic", "prefill"]
HOUR = 3600.0  # seconds a `"ttl": "1h"` entry lives


@dataclass(frozen=True)
class CachePricing:
    """One provider's prompt-cache rules.

    - `breakpoints` (Anthropic): a prefix is cached only up to a block marked `cache_control`;
      a request reads the longest cached prefix ending within `lookback` blocks before one of its
      breakpoints, writes from there to its last breakpoint (at `write`x), and bills the rest at 1x.
    - `automatic` (OpenAI, Gemini, DeepSeek): the longest prefix seen before is read, counted in
      `step`-token units from `min_tokens`; nothing is billed extra for writing.
    - `prefill` (a local model reusing the KV of its last prompt): what follows the common
      prefix is prefilled (`write` 1.0), what precedes it is free (`read` 0.0).
    """

    name: str
    read: float
    write: float
    mode: Mode
    min_tokens: int
    ttl: float  # seconds an entry lives after its last use
    step: int = 1
    max_breakpoints: int = 4
    lookback: int = 20
    provider: str | None = None  # genai-prices' provider id (None: no money, e.g. a local model)
    source: str = field(default="", repr=False)
    write_1h: float = 0.0  # a `"ttl": "1h"` write (0: the family has none)
    model: str | None = None  # whose own prices `read` and `write` are (None: the family's multipliers)

    def priced(self, uncached: int, read: int, written: int, written_1h: int = 0) -> Bill:
        """A request's input as billed, `written_1h` of its writes asked to live an hour: the one
        place a bill's cost is added up (what reads, writes and misses are is found by the
        callers: `prompt`, `PromptCache`, an upstream's usage)."""
        hour = min(written_1h, written)
        cost = uncached + self.read * read + self.write * (written - hour) + (self.write_1h or self.write) * hour
        return Bill(uncached, read, written, cost, hour)

    def prompt(self, tokens: int, common: int) -> Bill:
        """A prompt of `tokens` whose first `common` were sent just before, its newest block
        marked (as Claude Code marks it; automatic caches read the same): the common part is read
        and the rest written, where the prompt is long enough to be cached at all."""
        if tokens < self.min_tokens:
            return self.priced(tokens, 0, 0)
        read = common if common >= self.min_tokens else 0
        return self.split(tokens, read, tokens - read)

    def split(self, tokens: int, read: int, written: int) -> Bill:
        """A prompt of `tokens` of which `read` came from the cache and `written` went to it (all
        for an hour where every write here is hourly); an automatic cache or a prefill bills no
        write, so what it does not read is uncached."""
        if self.mode != "breakpoints":
            return self.priced(tokens - read, read, 0)
        return self.priced(tokens - read - written, read, written, written if self.hourly else 0)

    @property
    def hourly(self) -> bool:
        """Whether every write here is a `"ttl": "1h"` one (`anthropic-1h`, `money.for_model(..., "1h")`)."""
        return self.mode == "breakpoints" and self.ttl >= HOUR

    def cold(self, last: float, now: float) -> bool:
        """Whether a prompt sent at `last` (seconds; 0: not known, taken as warm) is gone from the
        cache by `now`: nothing of it is read back."""
        return last > 0 and now - last > self.ttl

    def steady(self, tokens: float) -> float:
        """A prompt sent again unchanged (what each later call pays for the part it keeps)."""
        return self.read * tokens if tokens >= self.min_tokens else tokens

    def rewrite_pays(self, saved_per_call: float, extra_now: float, calls_ahead: float) -> bool:
        """Whether a rewrite that costs `extra_now` more this call than appending, and then saves
        `saved_per_call` on every later prompt, pays back over `calls_ahead` calls."""
        return saved_per_call > 0 and calls_ahead * saved_per_call > extra_now


_ANTHROPIC = "platform.claude.com/docs/en/build-with-claude/prompt-caching (read 2026-12-05)"
_OPENAI = "developers.openai.com/api/docs/guides/prompt-caching (read 2026-12-05)"

CACHE_PRICING: MappingProxyType[str, CachePricing] = MappingProxyType({
    # 5-minute entries (the default), refreshed on every hit; 1,024 tokens is the minimum of the
    # Sonnet 4.x / Opus 4.1 models (Opus 4.5+ and Haiku 4.5 need 4,096: see "anthropic-4096").
    "anthropic": CachePricing("anthropic", 0.1, 1.25, "breakpoints", 1024, 300.0, provider="anthropic",
                              source=_ANTHROPIC, write_1h=2.0),
    "anthropic-4096": CachePricing("anthropic-4096", 0.1, 1.25, "breakpoints", 4096, 300.0, provider="anthropic",
                                   source=_ANTHROPIC, write_1h=2.0),
    "anthropic-1h": CachePricing("anthropic-1h", 0.1, 2.0, "breakpoints", 1024, 3600.0, provider="anthropic",
                                 source=_ANTHROPIC + ', `"ttl": "1h"`', write_1h=2.0),
    # Automatic from 1,024 tokens in 128-token steps; in-memory retention 5-10 minutes idle.
    "openai:gpt-4o": CachePricing("openai:gpt-4o", 0.5, 1.0, "automatic", 1024, 300.0, 128, provider="openai",
                                  source=_OPENAI),
    "openai:gpt-4.1": CachePricing("openai:gpt-4.1", 0.25, 1.0, "automatic", 1024, 300.0, 128, provider="openai",
                                   source=_OPENAI),
    "openai:gpt-5": CachePricing("openai:gpt-5", 0.1, 1.0, "automatic", 1024, 300.0, 128, provider="openai",
                                 source=_OPENAI),
    # Implicit caching on Gemini 2.5 and later: 2,048 tokens minimum on 2.5 (4,096 on 3.x),
    # cached input at a quarter of the price on 2.5 (ai.google.dev/gemini-api/docs/caching, read
    # 2026-12-05).
    "gemini": CachePricing("gemini", 0.25, 1.0, "automatic", 2048, 300.0, provider="google",
                           source="ai.google.dev/gemini-api/docs/caching (read 2026-12-05)"),
    # Disk caching on by default, hits at about a tenth of a miss, 64-token storage units
    # (api-docs.deepseek.com/guides/kv_cache, read 2026-12-05).
    "deepseek": CachePricing("deepseek", 0.1, 1.0, "automatic", 64, 3600.0, 64, provider="deepseek",
                             source="api-docs.deepseek.com/guides/kv_cache (read 2026-12-05)"),
    # A local model (transformers, vLLM, SGLang prefix caching): a changed prefix costs a prefill.
    "local": CachePricing("local", 0.0, 1.0, "prefill", 0, float("inf"), source="optictx.models prefix KV reuse"),
})


def get_cache_pricing(spec: str | CachePricing) -> CachePricing:
    """Cache rules by registry name, or the object itself (ConfigError listing the names)."""
    if isinstance(spec, CachePricing):
        return spec
    try:
        return CACHE_PRICING[spec]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown cache pricing {spec!r}; valid names: {', '.join(CACHE_PRICING)}") from None


def pricing_for(vision: str) -> CachePricing:
    """The cache rules of the consumer a cost model prices (its `cost.VisionProfile`): an API's,
    else, for a name with no profile, a local model's."""
    profile = PROFILES.get(vision)
    return CACHE_PRICING[profile.cache if profile is not None else "local"]


# -- the simulator -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Block:
    """One block of a request: equal keys are equal content. `breakpoint`: cache_control on it."""

    key: str
    tokens: int
    breakpoint: bool = False


@dataclass(frozen=True)
class Request:
    """A request as the cache sees it. `automatic`: Anthropic's top-level cache_control (a
    breakpoint on the last block)."""

    blocks: tuple[Block, ...]
    at: float = 0.0
    automatic: bool = False

    @property
    def tokens(self) -> int:
        return sum(b.tokens for b in self.blocks)

    def prefixes(self) -> Prefixes:
        """Its blocks' prefixes, and its breakpoints (the automatic one included)."""
        chain = Chain()
        for b in self.blocks:
            chain.push(b.key, b.tokens)
        marks = [i for i, b in enumerate(self.blocks) if b.breakpoint]
        if self.automatic and self.blocks and (not marks or marks[-1] != len(self.blocks) - 1):
            marks.append(len(self.blocks) - 1)
        return Prefixes(chain, len(self.blocks), tuple(marks), self.at)


class Chain:
    """Blocks one after another, with the digest and the token total of every prefix, each
    computed once as its block is pushed: a session's requests, each the one before with a few
    blocks more, are priced without hashing the whole conversation again (`Prefixes`). A prefix's
    digest is over the one before it and its last block's key."""

    def __init__(self) -> None:
        self.digests: list[bytes] = []
        self.totals: list[int] = []

    def __len__(self) -> int:
        return len(self.digests)

    def push(self, key: str, tokens: int) -> None:
        head = self.digests[-1] if self.digests else b""
        self.digests.append(hashlib.sha256(head + key.encode("utf-8", "surrogatepass") + b"\0").digest())
        self.totals.append((self.totals[-1] if self.totals else 0) + tokens)

    def cut(self, n: int) -> None:
        """Only the first `n` blocks kept (a client rewrote what followed them)."""
        del self.digests[n:], self.totals[n:]


@dataclass(frozen=True)
class Prefixes:
    """A request as its chain's first `n` blocks, with breakpoints after the blocks `marks`
    (indexes), sent `at`."""

    chain: Chain
    n: int
    marks: tuple[int, ...] = ()
    at: float = 0.0

    @property
    def tokens(self) -> int:
        return self.chain.totals[self.n - 1] if self.n else 0


@dataclass(frozen=True)
class Bill:
    """One request's input as billed: tokens at 1x, read from and written to the cache."""

    uncached: int
    read: int
    written: int
    cost: float  # in base-input tokens (`CachePricing.priced`)
    written_1h: int = 0  # of `written`, what was asked to live an hour (priced at `write_1h`)

    @property
    def tokens(self) -> int:
        return self.uncached + self.read + self.written


class PromptCache:
    """A provider's cache over a sequence of requests: `bill(request)` prices one and updates
    what is cached, as the provider would."""

    def __init__(self, pricing: str | CachePricing) -> None:
        self.pricing = get_cache_pricing(pricing)
        self._entries: dict[bytes, float] = {}  # prefix digest -> expiry
        self._last: list[bytes] = []  # prefill: the previous prompt's prefixes

    def bill(self, request: Request | Prefixes) -> Bill:
        """What `request` costs (as blocks, or as a chain's prefixes: the same bill)."""
        p = request.prefixes() if isinstance(request, Request) else request
        mode = self.pricing.mode
        if mode == "prefill":
            read, written = self._prefill(p), 0
        elif mode == "automatic":
            read, written = self._automatic(p), 0
        else:
            read, written = self._breakpoints(p)
        return self.pricing.split(p.tokens, read, written)

    def _alive(self, digest: bytes, at: float) -> bool:
        expiry = self._entries.get(digest)
        return expiry is not None and expiry >= at

    def _prefill(self, p: Prefixes) -> int:
        digests = p.chain.digests[: p.n]
        common = next((i for i, (a, b) in enumerate(zip(digests, self._last)) if a != b),
                      min(len(digests), len(self._last)))
        self._last = digests
        return p.chain.totals[common - 1] if common else 0

    def _automatic(self, p: Prefixes) -> int:
        digests, totals, ttl = p.chain.digests, p.chain.totals, self.pricing.ttl
        hit = next((totals[i] for i in range(p.n - 1, -1, -1) if self._alive(digests[i], p.at)), 0)
        self._entries.update(dict.fromkeys(digests[: p.n], p.at + ttl))
        if hit < self.pricing.min_tokens:
            return 0
        return hit - hit % self.pricing.step

    def _breakpoints(self, p: Prefixes) -> tuple[int, int]:
        rules, at, digests, totals = self.pricing, p.at, p.chain.digests, p.chain.totals
        if len(p.marks) > rules.max_breakpoints:
            raise ConfigError(f"{len(p.marks)} cache breakpoints in one request; {rules.name} allows "
                              f"{rules.max_breakpoints}")
        if not p.marks:
            return 0, 0
        read_end = -1  # the last block of the longest prefix read
        for m in p.marks:
            for j in range(m, max(-1, m - rules.lookback), -1):
                if self._alive(digests[j], at):
                    read_end = max(read_end, j)
                    break
        read = totals[read_end] if read_end >= 0 else 0
        cacheable = [m for m in p.marks if totals[m] >= rules.min_tokens]
        last = max(cacheable, default=-1)
        written = max(0, totals[last] - read) if last > read_end else 0
        for i in (*cacheable, *([read_end] if read_end >= 0 else [])):
            self._entries[digests[i]] = at + rules.ttl
        return read, written


def simulate(requests: Iterable[Request], pricing: str | CachePricing) -> list[Bill]:
    """Each request's bill, in order, with the cache the earlier ones left."""
    cache = PromptCache(pricing)
    return [cache.bill(r) for r in requests]

