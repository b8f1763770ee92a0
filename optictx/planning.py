"""What a memory keeps between its contexts, so that each call is planned from the last: the
append-only plan per (budget, consumer, policy) and the turns after its frozen front
(`planstate.py`, decided by `prefix.py`), the tiers each budget's last context sent (sticky
tiers), and the legibility gate's floors with what its store holds of them."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from .assemble import assemble
from .budget import Budget
from .context import Context
from .cost import CostModel
from .errors import ConfigError
from .gate import LegibilityGate
from .images import PageImages
from .lru import LRU
from .packer import Page
from .plan import Plan, Snapshot, plan
from .planstate import PlanStates, Tail, state_key, tail_turns
from .policy import Policy
from .prefix import next_plan
from .store import Store
from .tiers import Tier
from .turns import Turn
from .weight import light

# How a memory is read for planning: its snapshot now, or with these turns as the recent ones.
Snapshotter = Callable[[Budget, CostModel, Sequence[Turn] | None], Snapshot]


class Planning:
    """One memory's plan state between calls (its caller holds the memory's lock)."""

    def __init__(self, store: Store, images: PageImages, gate: LegibilityGate | None) -> None:
        self._store, self._images, self.gate = store, images, gate
        self._plans = PlanStates(store)
        self._tail = Tail(store)  # turns from the frozen front's end on, kept after they are read
        # sticky: (budget, vision) -> the sealed pages' tiers in its last context; a few budgets
        # in use at once, not every one ever asked
        self._last_tiers: LRU[tuple[int, str], list[Tier]] = LRU(max_items=8)
        self._floor_key: str | None = None  # the gate whose stored floors were taken in
        self._floors_stored: set[str] = set()  # page digests whose floors the store holds

    def note(self, turn: Turn) -> None:
        self._tail.note(turn)

    def last_tiers(self, budget: Budget, cost: CostModel) -> tuple[Tier, ...]:
        return tuple(self._last_tiers.get((budget.limit, cost.name)) or ())

    def context(self, snapshot: Snapshotter, budget: Budget, cost: CostModel, policy: Policy, fixed: set[int],
                commit: bool, at: float) -> Context:
        """This call's context: appended to the last one (`Policy.cache`), or planned afresh.
        `at`: the call's time (the provider's cache may have gone cold since the last one)."""
        if policy.cache:
            return self._appended(snapshot, budget, cost, policy, fixed, commit, at)
        snap = snapshot(budget, cost, None)

        def planned(policy: Policy) -> tuple[Context, Plan]:
            fitted = plan(snap, budget, cost, policy)
            return assemble(snap, fitted, budget, cost, self._images), fitted

        ctx, fitted = light(planned, policy)
        if policy.sticky:
            self._last_tiers[budget.limit, cost.name] = fitted.tiers[: len(snap.pack.sealed)]
        return ctx

    def _appended(self, snapshot: Snapshotter, budget: Budget, cost: CostModel, policy: Policy, fixed: set[int],
                  commit: bool, at: float) -> Context:
        key = state_key(budget, cost, policy)

        def tail(upto: int) -> Snapshot:
            return snapshot(budget, cost, tail_turns(self._tail.since(upto), upto, fixed))

        def build(snap: Snapshot, fitted: Plan) -> Context:
            return assemble(snap, fitted, budget, cost, self._images)

        ctx, state, _ = light(lambda policy: next_plan(self._plans.get(key), lambda: snapshot(budget, cost, None),
                                                       tail, build, budget, cost, policy, at), policy)
        if commit:
            if policy.sticky:  # what a compaction may not sharpen (plan.never_sharper)
                tiers = {s.page.index: s.tier for s in ctx.pages} | {p.index: Tier.GONE for p in ctx.gone}
                self._last_tiers[budget.limit, cost.name] = [tiers.get(i, Tier.GONE) for i in range(len(tiers))]
            self._plans.put(key, state)
            self._tail.keep_from(min(s.upto for s in self._plans.values()))
        return ctx

    def legibility(self, sealed: Sequence[Page]) -> list[dict[str, Any]]:
        """Per sealed page, what the gate found (`Memory.legibility`), reading what it had not."""
        if self.gate is None:
            raise ConfigError("legibility() needs a gate: Memory(gate=LegibilityGate(reader))")
        self.floors(sealed)
        return [{"page": n, "turns": [p.turn_ids[0], p.turn_ids[-1]], **(self.gate.measured(p.digest) or {})}
                for n, p in enumerate(sealed)]

    def floors(self, sealed: Sequence[Page]) -> list[Tier]:
        """The gate's floors of `sealed`, with what the store holds taken in first and what was
        newly read stored: a reopened memory does not read its pages again."""
        gate = self.gate
        assert gate is not None
        key = gate.key
        if key is not None and key != self._floor_key:  # this gate's first use here
            # Only what the gate took counts as stored: a damaged row is read again and rewritten.
            self._floor_key, self._floors_stored = key, gate.remember(self._store.load_floors(key))
        floors = gate.floors(sealed, self._images)
        if key is not None:
            fresh = {p.digest: found for p in sealed if p.digest not in self._floors_stored
                     for found in [gate.measured(p.digest)] if found is not None}
            if fresh:
                self._store.save_floors(key, {d: json.dumps(f) for d, f in fresh.items()})
                self._floors_stored.update(fresh)
        return floors
