"""Policy: every choice that shapes a plan, as one frozen value (`Memory(policy=...)`).

The ladder and the fitter are Protocols (`schedule.Ladder`, `schedule.Fitter`): a new one is a
small class with one method, and the invariant tests run over every policy in
`tests/test_schedule.py`'s matrix.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from .errors import ConfigError
from .facts import Factsheet
from .limits import Limits
from .promptcache import CACHE_PRICING, CachePricing
from .schedule import AgeLadder, Fitter, Ladder, OldestFirst


@dataclass(frozen=True)
class Policy:
    """How a memory plans its contexts.

    - `ladder`, `fitter`: the tier each page wants, and how pages give way to the budget;
    - `factsheet`: the exact strings kept verbatim beside the images (None: no factsheet);
    - `sticky`: a page is never sent sharper than in the last context for the same budget and
      vision, so it fades and stays faded (a prompt that moves is prefilled again);
    - `limits`: hard caps on turns and on images per context;
    - `verbatim`: a conversation that fits the budget goes as it came (every turn as itself, in
      order), and a context never costs more than that conversation. False only to measure the
      optical path itself at budgets that would not need it.
    - `cache`: each context is the last one with the new turns appended, until a compaction that
      the budget forces or that pays under the consumer's prompt-cache prices (`prefix.py`);
      False plans every context afresh (the prompt's front then moves on most calls).
    - `headroom`: the share of the budget a forced compaction leaves free for the turns to come;
      `horizon`: the calls still to come, as a multiple of the calls so far, over which a
      later compaction must pay back; `first_horizon`: the same for the first one, which images
      the whole conversation so far (on recorded sessions a longer bet pays for it, where for
      later ones it makes them too frequent, each writing the tail again: BENCHMARKS.md);
      `margin`: how many times over it must pay back there (a bet on calls that may never come:
      at 1.5 it still breaks even if the session ends a third sooner than the horizon says);
      `pricing`: the consumer's cache rules (a `CACHE_PRICING` name or
      a `CachePricing`; None: the provider the cost model names, a local model's otherwise).
    - `risk`: how far above the conversation sent as it came a paid compaction may take the
      memory's bill so far, as a share of what that would have cost so far (`prefix.Tally`).
      0.1 (the default): no conversation's modeled bill above 1.1x of sending it as it came, at
      any call. None: no bound, the expected saving alone decides. 0: never above it at any
      call, under the consumer's cache rules as modeled: a compaction on a warm cache always
      costs more than appending that call, so the first one then waits for a saving that covers
      it (a cold cache's compaction, which costs less, or one the hard budget forces), and an
      agent that never pauses longer than the cache lives is sent as it came until then
      (BENCHMARKS.md, "A bound on the bet").
    - `words`: a user turn with a person's words in it (`words.is_words`: not only what an agent
      wrapped around them), or an instruction file a client forwards, stays text in place, never
      drawn on a page; where a hard budget cannot hold them all, the oldest give way and the
      caption says which. Off in the library by default: an agent that sends its tools' output
      as user messages (SWE-agent) would keep all of it as text; `optictx serve` turns it on.
    - `tools`: the names of the tools the model has for the pages (`search`, `recall`, as its
      tool list spells them): the caption before the pages says to call them (`pieces.caption`).
    """

    ladder: Ladder = AgeLadder()  # noqa: RUF009 (frozen values, safe to share)
    fitter: Fitter = OldestFirst()  # noqa: RUF009
    factsheet: Factsheet | None = Factsheet()  # noqa: RUF009
    sticky: bool = False
    limits: Limits = Limits()  # noqa: RUF009
    verbatim: bool = True
    cache: bool = True
    headroom: float = 0.3
    horizon: float = 0.25
    first_horizon: float = 0.5
    margin: float = 1.5
    pricing: str | CachePricing | None = None
    risk: float | None = 0.1
    tools: tuple[str, ...] = ()
    words: bool = False

    def __post_init__(self) -> None:
        checks = {"ladder": callable(getattr(self.ladder, "tiers", None)),
                  "fitter": callable(getattr(self.fitter, "fit", None)),
                  "factsheet": self.factsheet is None or isinstance(self.factsheet, Factsheet),
                  "sticky": isinstance(self.sticky, bool), "limits": isinstance(self.limits, Limits),
                  "verbatim": isinstance(self.verbatim, bool), "cache": isinstance(self.cache, bool),
                  "headroom": isinstance(self.headroom, (int, float)) and 0 <= self.headroom < 1,
                  "horizon": isinstance(self.horizon, (int, float)) and 0 <= self.horizon <= 1000,
                  "first_horizon": isinstance(self.first_horizon, (int, float)) and 0 <= self.first_horizon <= 1000,
                  "margin": isinstance(self.margin, (int, float)) and 1 <= self.margin <= 1000,
                  "pricing": self.pricing is None or isinstance(self.pricing, CachePricing) or (
                      isinstance(self.pricing, str) and self.pricing in CACHE_PRICING),
                  "risk": self.risk is None or (isinstance(self.risk, (int, float)) and not isinstance(self.risk, bool)
                                                and 0 <= self.risk <= 1000),
                  "tools": isinstance(self.tools, tuple) and len(self.tools) <= 4 and all(
                      isinstance(t, str) and 0 < len(t) <= 64 and t.isprintable() for t in self.tools),
                  "words": isinstance(self.words, bool)}
        wants = {"ladder": "a Ladder (with tiers(n, *, unsealed=0))", "fitter": "a Fitter (with fit(tiers, costs, "
                 "room))", "factsheet": "a Factsheet or None", "sticky": "a bool", "limits": "a Limits",
                 "verbatim": "a bool", "cache": "a bool", "headroom": "a number in [0, 1)",
                 "horizon": "a number in [0, 1000]", "first_horizon": "a number in [0, 1000]",
                 "margin": "a number in [1, 1000]",
                 "pricing": f"None, a CachePricing or one of {', '.join(CACHE_PRICING)}",
                 "risk": "None or a number in [0, 1000]",
                 "tools": "a tuple of at most 4 tool names (1 to 64 printable characters)", "words": "a bool"}
        for name, ok in checks.items():
            if not ok:
                raise ConfigError(f"policy {name} must be {wants[name]}, got {type(getattr(self, name)).__name__}")

    @classmethod
    def from_kwargs(cls, base: Policy | None, kwargs: dict[str, Any]) -> Policy:
        """`base` (default: the defaults) with fields given by Memory's shorthand keywords:
        ladder=, fitter=, factsheet=, limits=, sticky_tiers=, verbatim=, cache=, headroom=, horizon=,
        first_horizon=, margin=, pricing=, risk=, words=."""
        names = {f.name for f in fields(cls)} - {"sticky"} | {"sticky_tiers"}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise ConfigError(f"Memory() got unexpected keyword argument(s) {', '.join(unknown)}; "
                            f"policy fields: {', '.join(sorted(names))}")
        given = {("sticky" if k == "sticky_tiers" else k): v for k, v in kwargs.items()}
        for name, value in given.items():
            if name in ("ladder", "fitter") and value is None:
                given[name] = getattr(cls, name)  # None: the default strategy, as before policies
        policy = base or cls()
        return cls(**{**{f.name: getattr(policy, f.name) for f in fields(cls)}, **given})


def _field(name: str, *, settable: bool = False) -> Any:
    """A field of the owner's policy as an attribute of the owner."""
    return property(lambda self: getattr(self.policy, name),
                    (lambda self, v: self._set_policy(**{name: v})) if settable else None)


class PolicyFields:
    """The policy's fields, readable (and some settable) on its owner (`Memory`): a new policy
    takes effect on the next context (`mem.factsheet = None` for an optical-only context)."""

    policy: Policy
    _lock: Any  # the owner's lock: a policy is swapped whole, never half-changed

    ladder: Ladder = _field("ladder", settable=True)
    fitter: Fitter = _field("fitter", settable=True)
    factsheet: Factsheet | None = _field("factsheet", settable=True)
    limits: Limits = _field("limits")
    sticky_tiers: bool = _field("sticky")
    verbatim: bool = _field("verbatim")
    cache: bool = _field("cache")
    headroom: float = _field("headroom")
    horizon: float = _field("horizon")
    first_horizon: float = _field("first_horizon")
    margin: float = _field("margin")
    risk: float | None = _field("risk")

    def _set_policy(self, **changed: Any) -> None:
        with self._lock:
            self.policy = replace(self.policy, **changed)
