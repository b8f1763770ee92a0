"""Append-only planning across calls: the prompt of each call is the last one with the new turns
appended, until a compaction.

A provider bills a repeated prompt prefix at a fraction of its price (`promptcache.py`), and a
local model reuses its KV for it, so a plan that changes the front of the prompt on every call
costs more than the tokens it saves. Here the pages, their tiers and the factsheet are frozen at
a compaction (`Frozen`); every later call sends the same front and the turns since then as
themselves. A compaction is an explicit, priced event (`Planned.event`), decided by `next_plan`:

- forced: the appended prompt would exceed the hard budget, the images cap or the bytes one
  request may carry (`weight.py`), or the system and pinned turns changed. It plans to the
  budget less `Policy.headroom`, so the next one is far.
- paid: what it saves on every later prompt, read from the cache at the provider's price over
  the calls still to come (estimated as `Policy.horizon` times the calls so far, or
  `Policy.first_horizon` times them for the first compaction), exceeds
  `Policy.margin` times what writing the changed part again costs now beyond appending. On a
  cold cache (the provider's entries expired since the last call: `CachePricing.ttl`) appending
  writes the whole prompt too, so a compaction that makes it smaller costs nothing more: it is
  no bet, and is weighed whether or not a page sealed since the last one was. With
  `Policy.risk` set, it must also leave the memory's bill so far within that share above what
  the conversation sent as it came would have cost so far (`Tally`). It never drops a page the
  appended prompt would send: under the cost of the conversation as it came (a compaction's
  ceiling), a small conversation's pages may not all fit, and dropping them saves by forgetting.

A compaction is the stateless planner (`plan.plan`) cut at the last sealed page it images (or,
where it draws the open page, at that page as it stands): those pages are frozen at their tiers
(`freeze.py`), every turn after them goes as itself, never as drawn lines.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal

from .budget import Budget
from .context import Context
from .cost import CostModel
from .errors import BudgetError
from .freeze import Since, factsheet_tokens, freeze, frozen_plan, plan_images
from .pieces import common_prefix
from .plan import Snapshot, as_it_came, plan, safe_cuts
from .planned import Plan
from .planstate import Frozen
from .policy import Policy
from .promptcache import CachePricing, get_cache_pricing, pricing_for
from .schedule import AgeLadder
from .weight import within

Event = Literal["append", "verbatim", "first", "forced", "paid"]


# What planning reads of a memory: the stateless snapshot, and (`freeze.Since`) a snapshot whose
# recent turns are every turn (but system and pinned ones) from an id on.
Snap = Callable[[], Snapshot]
Build = Callable[[Snapshot, Plan], Context]


def next_plan(state: Frozen | None, snap: Snap, tail: Since, build: Build, budget: Budget, cost: CostModel,
              policy: Policy, now: float = 0.0) -> tuple[Context, Frozen, Event]:
    """This call's context and the state after it: the last prompt with the new turns appended,
    unless a compaction is forced or pays (module docstring). `now`: the call's time in seconds
    (0: not known, the cache taken as warm). Raises BudgetError when even the system and pinned
    turns do not fit."""
    pricing = get_cache_pricing(policy.pricing) if policy.pricing is not None else pricing_for(cost.name)
    cold = state is not None and pricing.cold(state.at, now)
    base = snap()
    compacting = for_compaction(policy, pricing)
    asis = base.original_tokens(cost)  # what the conversation costs as it came (None: not known)
    tally = Tally(pricing, state, asis, cold, now)
    ceiling = asis if policy.verbatim else None
    fixed = tuple(t.id for t in (*base.system, *base.pinned))  # type: ignore[misc]
    append = _append(state, base, tail, build, budget, cost, policy, fixed, ceiling)
    if append is not None and state is not None:
        ctx, frozen = append
        if frozen.fixed != state.fixed:  # a new system or pinned turn: the front moves anyway
            return tally.done(append, state.compactions + 1, "forced")
        sealed = len(base.pack.sealed)
        cost_append = tally.appending(ctx)
        # A compaction can only pay for pages that sealed since it was last weighed (unless the
        # cache went cold), and never where the cache reads for free (a local prefill): most
        # calls skip weighing one.
        if pricing.read > 0 and (sealed != state.tried or cold):
            cand = _compact(base, tail, build, budget, cost, compacting, fixed, ceiling, first=False)
            ext = _extended(state, cand[1], tail, build, budget, cost, policy, ceiling) if cand else None
            # Made to save money, a compaction drops no page the appended prompt would send (the
            # budget's forced ones may).
            priced = [(c, tally.compacting(ctx, c[0])) for c in (cand, ext) if c and len(c[0].gone) <= len(ctx.gone)]
            scored = [(_gain(pricing, policy, state, ctx, c[0], cost_append, paid, budget.limit), c, paid)
                      for c, paid in priced]
            gain, best, paid = max(scored, key=lambda s: s[0], default=(0.0, None, 0.0))
            if best is not None and gain > 0 and tally.affordable(paid, policy.risk):
                return tally.done((best[0], replace(best[1], tried=sealed)), state.compactions + 1, "paid", paid)
        kept = replace(frozen, base=state.base, since=state.since, tried=sealed)
        return tally.done((ctx, kept), state.compactions, "append", cost_append)
    if append is not None:  # the first call, and the conversation fits as it came
        return tally.done(append, 0, "verbatim")
    first = state is None
    cand = _compact(base, tail, build, budget, cost, compacting, fixed, ceiling, first=first)
    if cand is None:  # not even a compaction fits its own cut: plan as before, nothing frozen
        cand = build(base, plan(base, budget, cost, policy)), Frozen(upto=-1)
    return tally.done(cand, (state.compactions + 1) if state else 1, "first" if first else "forced")


def for_compaction(policy: Policy, pricing: CachePricing) -> Policy:
    """The policy a compaction plans with. Where the bill is the provider's (not a local
    prefill), an `AgeLadder` sends every sealed page at its oldest tier: a page's tier then never
    changes between compactions, so the next one appends its new pages after the old ones, and
    only what follows them is written to the cache again. Fading by age would rewrite the prompt
    from the first page it fades, at the cache-write price, at every compaction."""
    ladder = policy.ladder
    flat = pricing.mode != "prefill" and isinstance(ladder, AgeLadder)
    return replace(policy, verbatim=False,
                   ladder=replace(ladder, steps=(), hold=1) if flat else ladder)  # type: ignore[type-var]


class Tally:
    """One call's cost under the consumer's cache rules, through optictx and as the conversation
    came, and what that leaves of the memory's modeled saving so far (`Frozen.saved`), which
    `Policy.risk` bounds."""

    def __init__(self, pricing: CachePricing, state: Frozen | None, asis: int | None, cold: bool, now: float
                 ) -> None:
        self.pricing, self.state, self.cold, self.now = pricing, state, cold, now
        # As it came, each call reads the last call's conversation back (when warm) and writes the rest.
        kept = 0 if cold or state is None else min(state.asis, asis or 0)
        self.asis, self.asis_call = asis, None if asis is None else pricing.prompt(asis, kept).cost

    def appending(self, ctx: Context) -> float:
        """This call's cost if it sends the last prompt with the new turns appended."""
        state = self.state
        return self.pricing.prompt(ctx.tokens, 0 if self.cold or state is None else min(state.prompt_tokens, ctx.tokens)
                                   ).cost

    def compacting(self, append: Context, cand: Context) -> float:
        """This call's cost if it sends `cand`: what it shares with the last prompt is read back."""
        state = self.state
        kept = 0 if self.cold or state is None else min(state.prompt_pieces, len(append.pieces))
        return self.pricing.prompt(cand.tokens, piece_tokens(cand, common_prefix(cand.pieces, append.pieces[:kept]))
                                   ).cost

    def affordable(self, cost: float, risk: float | None) -> bool:
        """Whether a paid compaction costing `cost` leaves the memory's bill so far within `risk`
        (a share of what the conversation as it came would have cost so far) above that cost."""
        if risk is None or self.asis_call is None or self.state is None:
            return True
        after = self.state.saved + self.asis_call - cost
        return after >= -risk * (self.state.spent + self.asis_call)

    def done(self, made: tuple[Context, Frozen], compactions: int, event: Event, cost: float | None = None
             ) -> tuple[Context, Frozen, Event]:
        """The context marked with its event and breakpoints, and the state after it; `cost`:
        this call's (default: the whole prompt written, or as it came for a verbatim call)."""
        ctx, frozen = made
        if cost is None:
            cost = self.asis_call if event == "verbatim" and self.asis_call is not None else self.pricing.prompt(
                ctx.tokens, 0).cost
        old = self.state
        saved, spent = (old.saved, old.spent) if old else (0.0, 0.0)
        if self.asis_call is not None:
            saved, spent = saved + self.asis_call - cost, spent + self.asis_call
        fresh = event not in ("append", "verbatim")
        keys = [p.key for p in ctx.pieces]
        fixed = next((i for i, p in enumerate(ctx.pieces) if p.kind not in ("system", "pinned")), len(keys))
        # The front's mark goes after its last page, not after the factsheet lines that follow it:
        # a turn that goes on past that page moves its line after a later page at the next compaction.
        pages = [i for i, p in enumerate(ctx.pieces) if p.kind == "page"]
        front = fixed if frozen.verbatim or not pages else pages[-1] + 1
        marks = {fixed, front, len(keys)}
        if old is not None and fresh and 0 < old.front < front and _digest(keys[: old.front]) == old.front_key:
            marks.add(old.front)  # the last front is still a prefix: a breakpoint there reads it back
        state = replace(frozen, calls=(old.calls if old else 0) + 1, prompt_tokens=ctx.tokens,
                        prompt_pieces=len(keys), compactions=compactions, base=ctx.tokens if fresh else frozen.base,
                        since=1 if fresh else frozen.since + 1, front=front, front_key=_digest(keys[:front]),
                        at=self.now, asis=self.asis or 0, spent=spent, saved=saved)
        return ctx.marked(event, tuple(sorted(m for m in marks if m > 0))), state, event


def _digest(keys: Sequence[str]) -> str:
    return hashlib.sha256("\0".join(keys).encode()).hexdigest()[:24]


def _gain(pricing: CachePricing, policy: Policy, state: Frozen, append: Context, cand: Context, cost_append: float,
          cost_cand: float, limit: int) -> float:
    """What compacting to `cand` now (this call: `cost_cand`) saves over appending (`cost_append`),
    over the calls to come, less what it costs more now (in base-input tokens); at most 0 when it
    saves nothing per call.

    The calls to come are `policy.horizon` times the calls so far (`policy.first_horizon` before
    the first compaction: that one images everything so far, and until it happens nothing else
    saves), but no more than the calls until appending reaches the budget (at the growth per call
    since the last compaction): a compaction is forced there anyway, and what this one saves ends
    with it."""
    ahead = (policy.horizon if state.compactions else policy.first_horizon) * max(1, state.calls)
    growth = (append.tokens - state.base) / max(1, state.since)
    if growth > 0:
        ahead = min(ahead, (limit - append.tokens) / growth)
    saved = pricing.steady(append.tokens) - pricing.steady(cand.tokens)
    if not pricing.rewrite_pays(saved, policy.margin * (cost_cand - cost_append), ahead):
        return 0.0
    return ahead * saved - (cost_cand - cost_append)


def piece_tokens(ctx: Context, n: int) -> int:
    """Tokens of the first `n` pieces."""
    return sum(tokens_per_piece(ctx)[:n])


def tokens_per_piece(ctx: Context) -> list[int]:
    """Each piece's tokens: a segment cut into several pieces (factsheet lines, the open page's
    turns) shares its tokens by characters."""
    by_segment: dict[int, list[int]] = {}
    for i, p in enumerate(ctx.pieces):
        by_segment.setdefault(p.segment, []).append(i)
    out = [0] * len(ctx.pieces)
    for seg, members in by_segment.items():
        tokens = ctx.segments[seg].tokens
        if len(members) == 1:
            out[members[0]] = tokens
            continue
        chars = [len(ctx.pieces[i].prompt) for i in members]
        total, given, seen = sum(chars) or 1, 0, 0
        for i, c in zip(members, chars):
            seen += c
            share = tokens * seen // total - given
            out[i], given = share, given + share
    return out


# -- appending ---------------------------------------------------------------------------------

def _append(state: Frozen | None, base: Snapshot, tail: Since, build: Build, budget: Budget, cost: CostModel,
            policy: Policy, fixed: tuple[int, ...], ceiling: int | None) -> tuple[Context, Frozen] | None:
    """The last prompt with the new turns appended, if it is still valid and fits; with no state,
    the conversation as it came if it fits (the first call)."""
    image_cap = policy.limits.image_cap(cost.max_images)
    if state is None or state.verbatim:
        if not policy.verbatim:
            return None
        whole = as_it_came(base, ceiling, budget.limit, image_cap) if ceiling is not None else None
        ctx = build(base, whole) if whole is not None else None
        return (ctx, Frozen(verbatim=True, fixed=fixed)) if ctx is not None and within(ctx) else None
    if state.fixed != fixed or state.upto < 0:  # upto < 0: nothing was frozen (planned afresh)
        return None
    made = frozen_plan(state, tail(state.upto), cost)
    if made is None:
        return None
    snap, fplan = made
    if safe_cuts(snap.recent)[0] != 0:  # a new tool result whose call was never made
        return None
    limit = budget.limit if ceiling is None else min(budget.limit, ceiling)
    if fplan.tokens + factsheet_tokens(snap, fplan) > limit or (
            image_cap is not None and plan_images(snap, fplan) > image_cap):
        return None
    ctx = build(snap, fplan)
    return (ctx, state) if within(ctx) else None


# -- compacting --------------------------------------------------------------------------------

def _compact(base: Snapshot, tail: Since, build: Build, budget: Budget, cost: CostModel, policy: Policy,
             fixed: tuple[int, ...], ceiling: int | None, *, first: bool) -> tuple[Context, Frozen] | None:
    """A compaction: the stateless plan at the budget (less the headroom, after the first call),
    cut at its last imaged sealed page; tried at smaller targets while its cut does not fit.
    None when none fits (BudgetError when not even the fixed turns do)."""
    limit = budget.limit if ceiling is None else min(budget.limit, ceiling)  # never costlier than as it came
    # The headroom is against the hard budget (the next forced compaction far away), never
    # against the conversation's own size: that would drop pages to save money, not image them.
    target = limit if first else max(1, min(limit, int(budget.limit * (1 - policy.headroom))))
    image_cap = policy.limits.image_cap(cost.max_images)
    for _ in range(4):
        try:
            stateless = plan(base, Budget(tokens=target), cost, policy)
        except BudgetError:
            return None  # a smaller target than the fixed turns need: the caller plans at the budget
        frozen = freeze(stateless, base.pack, tail, fixed)
        if frozen is None:
            return None
        made = _fitted(frozen, tail, build, cost, limit, image_cap)
        if made is None or isinstance(made, tuple):
            return made
        target = max(1, target - max(made, limit // 8))
        if target <= 1:
            break
    return None


def _fitted(frozen: Frozen, tail: Since, build: Build, cost: CostModel, limit: int, image_cap: int | None
            ) -> tuple[Context, Frozen] | int | None:
    """The context a frozen state gives, if it fits `limit` and the images cap; else the tokens
    it is over (0 when only the images cap is), or None when its pages are not this memory's."""
    made = frozen_plan(frozen, tail(frozen.upto), cost)
    if made is None:
        return None
    snap, fplan = made
    over = fplan.tokens + factsheet_tokens(snap, fplan) - limit
    if over <= 0 and (image_cap is None or plan_images(snap, fplan) <= image_cap):
        return build(snap, fplan), frozen
    return max(0, over)


def _extended(state: Frozen, cand: Frozen, tail: Since, build: Build, budget: Budget, cost: CostModel,
              policy: Policy, ceiling: int | None) -> tuple[Context, Frozen] | None:
    """A compaction that keeps the frozen front: the state's pages at their tiers and their
    factsheet lines, then the pages `cand` (a compaction planned afresh) freezes after them. It
    writes only what follows the old front, where a compaction planned afresh may re-decide a
    page near the front (a page kept as text last time, imaged now) and so write nearly all of
    the prompt again. None when it adds no page or does not fit."""
    n = len(state.pages)
    if len(cand.pages) <= n or [d for d, _ in cand.pages[:n]] != [d for d, _ in state.pages]:
        return None
    factsheet = tuple(sorted({*state.factsheet, *((place, text) for place, text in cand.factsheet if place >= n)}))
    extended = replace(cand, pages=state.pages + cand.pages[n:], factsheet=factsheet)
    limit = budget.limit if ceiling is None else min(budget.limit, ceiling)
    made = _fitted(extended, tail, build, cost, limit, policy.limits.image_cap(cost.max_images))
    return made if isinstance(made, tuple) else None
