"""Policy: every choice that shapes a plan, as one frozen value (`Memory(policy=...)`).

The ladder and the fitter are Protocols (`schedule.Ladder`, `schedule.Fitter`): a new one is a
small class with one method, and the invariant tests run over every policy in
`tests/test_schedule.py`'s matrix.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import Field, dataclass, field, fields, replace
from typing import Any, Literal

from .errors import ConfigError
from .facts import Factsheet
from .limits import Limits
from .promptcache import CACHE_PRICING, CachePricing
from .schedule import AgeLadder, Fitter, Ladder, OldestFirst

Stored = Literal["plain", "object"]


def _about(check: Callable[[Any], bool], wants: str, stored: Stored, *, alias: str | None = None,
           added: bool = False, shown: bool = False, settable: bool = False) -> dict[str, Any]:
    """A `Policy` field's declaration, the one place it is said: its check and the message naming
    what it wants, how a store keeps it (`plain`: a JSON value as it is; `object`:
    `policystore.py` encodes it), the keyword `Memory` takes it by (`alias`), whether it came
    after plan states were first stored (`added`: left out of their key at its default, so the
    older keys stay), and whether `Memory` shows it as an attribute (`shown`; writable where
    `settable`)."""
    return {"check": check, "wants": wants, "stored": stored, "alias": alias, "added": added, "shown": shown,
            "settable": settable}


def _bool(value: Any) -> bool:
    return isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _within(lo: float, hi: float) -> Callable[[Any], bool]:
    return lambda value: _number(value) and lo <= value <= hi


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

    ladder: Ladder = field(default=AgeLadder(), metadata=_about(
        lambda v: callable(getattr(v, "tiers", None)), "a Ladder (with tiers(n, *, unsealed=0))", "object",
        shown=True, settable=True))
    fitter: Fitter = field(default=OldestFirst(), metadata=_about(
        lambda v: callable(getattr(v, "fit", None)), "a Fitter (with fit(tiers, costs, room))", "object",
        shown=True, settable=True))
    factsheet: Factsheet | None = field(default=Factsheet(), metadata=_about(
        lambda v: v is None or isinstance(v, Factsheet), "a Factsheet or None", "object", shown=True, settable=True))
    sticky: bool = field(default=False, metadata=_about(_bool, "a bool", "plain", alias="sticky_tiers", shown=True))
    limits: Limits = field(default=Limits(), metadata=_about(lambda v: isinstance(v, Limits), "a Limits", "object",
                                                             shown=True))
    verbatim: bool = field(default=True, metadata=_about(_bool, "a bool", "plain", shown=True))
    cache: bool = field(default=True, metadata=_about(_bool, "a bool", "plain", shown=True))
    headroom: float = field(default=0.3, metadata=_about(lambda v: _number(v) and 0 <= v < 1, "a number in [0, 1)",
                                                         "plain", shown=True))
    horizon: float = field(default=0.25, metadata=_about(_within(0, 1000), "a number in [0, 1000]", "plain",
                                                         shown=True))
    first_horizon: float = field(default=0.5, metadata=_about(_within(0, 1000), "a number in [0, 1000]", "plain",
                                                              shown=True))
    margin: float = field(default=1.5, metadata=_about(_within(1, 1000), "a number in [1, 1000]", "plain", shown=True))
    pricing: str | CachePricing | None = field(default=None, metadata=_about(
        lambda v: v is None or isinstance(v, CachePricing) or (isinstance(v, str) and v in CACHE_PRICING),
        f"None, a CachePricing or one of {', '.join(CACHE_PRICING)}", "object"))
    risk: float | None = field(default=0.1, metadata=_about(
        lambda v: v is None or _within(0, 1000)(v), "None or a number in [0, 1000]", "plain", added=True, shown=True))
    tools: tuple[str, ...] = field(default=(), metadata=_about(
        lambda v: isinstance(v, tuple) and len(v) <= 4 and all(
            isinstance(t, str) and 0 < len(t) <= 64 and t.isprintable() for t in v),
        "a tuple of at most 4 tool names (1 to 64 printable characters)", "object", added=True))
    words: bool = field(default=False, metadata=_about(_bool, "a bool", "plain", added=True))

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not f.metadata["check"](value):
                raise ConfigError(f"policy {f.name} must be {f.metadata['wants']}, got {type(value).__name__}")

    @classmethod
    def from_kwargs(cls, base: Policy | None, kwargs: dict[str, Any]) -> Policy:
        """`base` (default: the defaults) with fields given by Memory's keywords: each field by
        its name, `sticky` as `sticky_tiers` (`keyword`)."""
        names = {keyword(f): f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise ConfigError(f"Memory() got unexpected keyword argument(s) {', '.join(unknown)}; "
                              f"policy fields: {', '.join(sorted(names))}")
        given = {names[k]: v for k, v in kwargs.items()}
        for name, value in given.items():
            if name in ("ladder", "fitter") and value is None:
                given[name] = getattr(cls(), name)  # None: the default strategy, as before policies
        return replace(base or cls(), **given)


def keyword(f: Field[Any]) -> str:
    """The keyword `Memory` takes a policy field by (and shows it as, and a store keeps it under)."""
    return f.metadata["alias"] or f.name


def _field(name: str, *, settable: bool = False) -> Any:
    """A field of the owner's policy as an attribute of the owner."""
    return property(lambda self: getattr(self.policy, name),
                    (lambda self, v: self._set_policy(**{name: v})) if settable else None)


class PolicyFields:
    """The policy's fields `shown` in their declaration, readable (the `settable` ones settable)
    on its owner (`Memory`): a new policy takes effect on the next context (`mem.factsheet =
    None` for an optical-only context)."""

    policy: Policy
    _lock: Any  # the owner's lock: a policy is swapped whole, never half-changed

    def _set_policy(self, **changed: Any) -> None:
        with self._lock:
            self.policy = replace(self.policy, **changed)


for _one in fields(Policy):
    if _one.metadata["shown"]:
        setattr(PolicyFields, keyword(_one), _field(_one.name, settable=_one.metadata["settable"]))
