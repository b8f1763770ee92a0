"""The plan state between calls (`Frozen`): what the append-only planner (`prefix.py`) froze at
its last compaction and what the last call sent, how a memory keeps it in its store, and the
turns each call sends as themselves."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from .budget import Budget
from .cost import CostModel
from .policy import Policy
from .promptcache import get_cache_pricing, pricing_for
from .tiers import Tier
from .turns import Turn


@dataclass(frozen=True, kw_only=True)
class Frozen:
    """What stays fixed between compactions, and what the last call sent.

    `pages`: the digests of pages 0..m-1 with the tier each is sent at (GONE: dropped), sealed
    pages but, where `part` is set, the last: the first `part` lines of page m-1 as they stood
    when it was still open (the packer only adds lines to an open page, so they stay its first
    lines, open or sealed since); `factsheet`: its texts by place (-1 before the first page, i
    after page i); `upto`: turns from this id on (other than system and pinned ones) go as
    themselves; `fixed`: the system and pinned turns' ids; `verbatim`: every turn as itself in
    order (nothing frozen but that).
    """

    pages: tuple[tuple[str, Tier], ...] = ()
    factsheet: tuple[tuple[int, str], ...] = ()
    upto: int = 0
    fixed: tuple[int, ...] = ()
    verbatim: bool = False
    calls: int = 0  # contexts made so far (the horizon is estimated from it)
    prompt_tokens: int = 0  # tokens of the last prompt
    prompt_pieces: int = 0  # pieces of the last prompt
    compactions: int = 0
    base: int = 0  # tokens of the prompt right after the last compaction
    since: int = 0  # calls since the last compaction (that one counted)
    front: int = 0  # pieces of the frozen front (system, pinned, caption, pages, factsheet)
    front_key: str = ""  # a digest of their keys
    tried: int = -1  # sealed pages when a compaction was last weighed
    at: float = 0.0  # when the last call was made (seconds; 0: not known): the cache may have expired since
    # The bill so far under the consumer's cache rules (prefix.Tally), in base-input tokens:
    asis: int = 0  # tokens of the conversation as it came at the last call
    spent: float = 0.0  # what the calls so far would have cost with the conversation sent as it came
    saved: float = 0.0  # how much less they cost through optictx (negative: more)
    part: int = 0  # lines of the last page frozen while it was open (0: every page whole)

    def to_json(self) -> str:
        body = {_STORED.get(f.name, f.name): _plain(getattr(self, f.name)) for f in fields(self)}
        return json.dumps(body, ensure_ascii=True)

    @classmethod
    def from_json(cls, text: str) -> Frozen | None:
        """A stored state, or None when it is damaged (the next call compacts: never trusted)."""
        try:
            b = json.loads(text)
            given = {f.name: _typed(f.name, b[_STORED.get(f.name, f.name)], f.default) for f in fields(cls)
                     if not (f.name in _LATER and _STORED.get(f.name, f.name) not in b)}
            return cls(**given)
        except (ValueError, KeyError, TypeError):
            return None


# "sent" and "pieces" are the stored names of prompt_tokens and prompt_pieces: states stored
# before the rename load as they are; fields a state stored before them lacks take their default.
_STORED = {"prompt_tokens": "sent", "prompt_pieces": "pieces"}
_LATER = frozenset({"at", "asis", "spent", "saved", "part"})


def _plain(value: Any) -> Any:
    """A field's value as JSON holds it (tiers by name, tuples as lists)."""
    if isinstance(value, Tier):
        return value.value
    return [_plain(v) for v in value] if isinstance(value, tuple) else value


def _typed(name: str, value: Any, default: Any) -> Any:
    """A stored field back (ValueError, TypeError: damaged)."""
    if name == "pages":
        return tuple((str(d), Tier(t)) for d, t in value)
    if name == "factsheet":
        return tuple((int(p), str(s)) for p, s in value)
    if name == "fixed":
        return tuple(int(i) for i in value)
    return type(default)(value)


def state_key(budget: Budget, cost: CostModel, policy: Policy) -> str:
    """The name a memory stores the state of one (budget, consumer, policy) under: a context
    planned under another policy (`mem.factsheet = None`) starts from a compaction of its own."""
    # A field added after states were first stored is left out at its default, so the key a
    # state was stored under before it stays the same; a function's address changes per process.
    # The cache's prices decide when a compaction pays, not what a state holds: pricing enters
    # the key by its family's name, and not at all where that is the consumer's own family (a
    # model's prices, `money.for_model`, continue the state planned at the family's).
    family = get_cache_pricing(policy.pricing).name if policy.pricing is not None else None
    values = {f.name: getattr(policy, f.name) for f in fields(policy)}
    values["pricing"] = None if family == pricing_for(cost.name).name else family
    shown = [f for f in fields(policy) if f.repr and not (f.metadata["added"] and values[f.name] == f.default)]
    body = ", ".join(f"{f.name}={values[f.name]!r}" for f in shown)
    shape = re.sub(r" at 0x[0-9a-f]+", "", f"{type(policy).__qualname__}({body})")
    return f"plan1:{budget.limit}:{cost.name}:{hashlib.sha256(shape.encode()).hexdigest()[:12]}"


def tail_turns(turns: Sequence[Turn], upto: int, fixed: set[int]) -> list[Turn]:
    """Turns from id `upto` on, other than the system and pinned ones."""
    return [t for t in turns if t.id is not None and t.id >= upto and t.id not in fixed]



class PlanStates:
    """The frozen state per (budget, consumer) of one memory, kept in its store's derived cache
    beside the gate's floors, so a reopen or another replica continues the same prefix. Read from
    the store on every use (another replica may have moved it on); a damaged row is a compaction,
    never trusted."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._states: dict[str, Frozen] = {}
        self._written: dict[str, str] = {}  # what this memory stored last, per key

    def get(self, key: str) -> Frozen | None:
        stored = self._store.load_floors(key).get("state")
        if stored is not None:
            if stored == self._written.get(key) and key in self._states:  # its own: not read again
                return self._states[key]
            state = Frozen.from_json(stored)
            if state is not None:
                self._states[key] = state
                return state
        return self._states.get(key)

    def put(self, key: str, state: Frozen) -> None:
        if self._states.get(key) == state:
            return
        self._states[key] = state
        if len(self._states) > 8:  # a few budgets in use at once, not every one ever asked
            gone = next(iter(self._states))
            del self._states[gone]
            self._written.pop(gone, None)
        self._written[key] = state.to_json()
        self._store.save_floors(key, {"state": self._written[key]})

    def values(self) -> list[Frozen]:
        return list(self._states.values())


class Tail:
    """Turns from some id on, kept in RAM once read: each call sends the turns after the frozen
    front as themselves, and reading them from the store on every call would read them again.
    Only turns the memory has taken in (`note`): other writers' newer ones wait for its sync."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self._from: int | None = None  # the id of self._turns[0]; None: nothing kept
        self._turns: list[Turn] = []
        self._last = -1  # the last turn the memory took in

    def note(self, turn: Turn) -> None:
        self._last = turn.id  # type: ignore[assignment]
        if self._from is not None:
            self._turns.append(turn)

    def since(self, upto: int) -> list[Turn]:
        if self._from is None or upto < self._from:
            self._turns = [t for t in self._store.since(upto - 1) if t.id <= self._last]  # type: ignore[operator]
            self._from = upto
        return self._turns[upto - self._from:]

    def keep_from(self, upto: int) -> None:
        """Forget the turns before `upto` (no state sends them as themselves any more)."""
        if self._from is not None and upto > self._from:
            del self._turns[: upto - self._from]
            self._from = upto
