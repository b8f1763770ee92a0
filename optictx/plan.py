"""Planning: which recent turns join the pages, and the tier of every page, as one pipeline.

`plan(snapshot, budget, cost, policy) -> Plan` reads top to bottom, one named step each:

0. `as_it_came`: a conversation that fits goes as it came, every turn as itself in order;
   otherwise no context costs more than it would (the budget is capped at its cost);
1. `safe_cuts`: where the recent turns may be cut into pages and text (tool pairs kept whole);
   the fewest turns go onto pages that fit;
2. `price_pages`: what every page costs at each tier, with the legibility gate's floors;
3. `ladder_tiers`: the tier each page wants by age (an image only where it pays);
4. `fit`: the policy's fitter demotes or drops pages until the budget holds;
5. `cap_images`: no more images than the consumer takes in one request;
6. `never_sharper`: with sticky tiers, no page sharper than last time;
7. `with_factsheet`: room for the factsheet, and its lines placed beside their pages.

Each step takes and returns values; none changes what another returned. The snapshot is the
memory at one moment (`Memory` makes it under its lock), so a plan needs no `Memory`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from .budget import Budget
from .cost import CostModel
from .errors import BudgetError
from .factlines import TurnFacts, with_factsheet
from .native import images_cost
from .packer import PackView, Page
from .pieces import CAPTION, left_out
from .planned import Plan
from .policy import Policy
from .schedule import Fitter, PageCost, ladder_tiers, page_costs
from .tiers import Tier
from .turnindex import WORDS
from .turns import Turn


@dataclass(frozen=True, eq=False, kw_only=True)
class Snapshot:
    """What planning reads of a memory at one moment: its turns not on pages, the packer's frozen
    view, and the counts and floors planning needs."""

    system: tuple[Turn, ...]
    pinned: tuple[Turn, ...]
    recent: tuple[Turn, ...]  # turns not on a sealed page yet, oldest first
    tokens: Mapping[int, int]  # turn id -> native text tokens, for every turn above
    pack: PackView
    count: Callable[[str], int]
    images: Mapping[int, tuple[tuple[int, int] | None, ...]] = field(default_factory=dict)  # turn id -> its
    #   native images' sizes, for the turns above that have any (`native.image_sizes`)
    floors: tuple[Tier, ...] = ()  # the legibility gate's floor per sealed page (none: no gate)
    last_tiers: tuple[Tier, ...] = ()  # sticky: the sealed pages' tiers in the last context
    facts: TurnFacts | None = field(default=None, repr=False)  # the factsheet's strings per turn
    transcript: tuple[Turn, ...] | None = None  # every turn in order, given when its text alone fits
    #   (`tokens` and `images` then cover them all)
    text_total: int | None = None  # native text tokens of every turn (None: unknown, no step 0)
    all_images: tuple[tuple[int, int] | None, ...] = ()  # the sizes of every turn's native images
    inline: tuple[Turn, ...] = ()  # turns that stay text in place, on pages already (not in `recent`)
    inline_ids: frozenset[int] = frozenset()  # every such turn's id, `recent` ones included
    caption: str = CAPTION  # the text before the pages (`pieces.caption`)

    def in_place(self, cut: int) -> tuple[Turn, ...]:
        """The turns that stay text in place when recent[:cut] joins the pages: on pages already,
        and those among recent[:cut]."""
        return (*self.inline, *(t for t in self.recent[:cut] if t.id in self.inline_ids))

    def turn_tokens(self, turn: Turn, cost: CostModel) -> int:
        """A turn sent as itself: its text tokens and its images under `cost`."""
        sizes = self.images.get(turn.id)  # type: ignore[arg-type]
        return self.tokens[turn.id] + (images_cost(sizes, cost) if sizes else 0)  # type: ignore[index]

    def image_count(self, turns: Sequence[Turn]) -> int:
        return sum(len(self.images.get(t.id, ())) for t in turns)  # type: ignore[arg-type]

    def original_tokens(self, cost: CostModel) -> int | None:
        """What the whole conversation costs sent as it came, under `cost` (None: unknown)."""
        return None if self.text_total is None else self.text_total + images_cost(self.all_images, cost)


def plan(snap: Snapshot, budget: Budget, cost: CostModel, policy: Policy) -> Plan:
    """The context's plan under `budget` for a consumer priced by `cost`. Raises BudgetError
    (with the shortfall) when even the system and pinned turns do not fit."""
    limit, caption = budget.limit, snap.count(snap.caption)
    image_cap = policy.limits.image_cap(cost.max_images)
    original = snap.original_tokens(cost) if policy.verbatim else None
    if original is not None:
        if whole := as_it_came(snap, original, limit, image_cap):
            return whole
        limit = min(limit, original)  # never worse than sending the conversation as it came
    fixed = [*snap.system, *snap.pinned]
    fixed_tokens = sum(snap.turn_tokens(t, cost) for t in fixed)
    recent_tokens = [snap.turn_tokens(t, cost) for t in snap.recent]
    if image_cap is not None and snap.image_count(fixed) > image_cap:
        raise BudgetError(f"system and pinned turns hold {snap.image_count(fixed)} images, but {cost.name!r} takes "
                          f"at most {image_cap} per request: unpin turns or raise Limits.max_images")
    last = max(snap.tokens, default=0)  # the longest ids the caption's note may name, planned first
    note = snap.count(left_out([last, last]))
    gone = give_way(snap, limit - fixed_tokens - caption - note, cost)
    caption += note if gone else 0  # the caption says what gave way
    for cut in safe_cuts(snap.recent):
        # Native images count against the cap: when those of the turns kept as text are too many,
        # more turns go onto pages (where an image is drawn as "[image]"). Turns that stay text in
        # place cost the same wherever the cut is.
        in_place = [t for t in snap.in_place(cut) if t.id not in gone]
        native = snap.image_count([*fixed, *in_place, *snap.recent[cut:]])
        other = fixed_tokens + sum(snap.turn_tokens(t, cost) for t in in_place) + sum(recent_tokens[cut:])
        if other + (caption if gone else 0) > limit or (image_cap is not None and native > image_cap):
            continue  # the text alone is over, or its images: more turns onto pages
        pages = [*snap.pack.sealed, *snap.pack.preview(snap.recent[:cut])]
        costs = price_pages(pages, snap, cost)
        want = ladder_tiers(costs, policy.ladder, unsealed=len(pages) - len(snap.pack.sealed))
        cap = None if image_cap is None else image_cap - native
        tiers_for = partial(_fitted_tiers, want, costs, policy, cap, snap.last_tiers)
        unfitted = Plan(cut, pages, want, costs, other, caption, left_out=tuple(sorted(gone)), count=snap.count)
        fitted = unfitted.refit(tiers_for, limit - other - (caption if pages else 0))
        if policy.factsheet is None or snap.facts is None:
            return fitted
        return with_factsheet(fitted, limit, policy.factsheet, snap.facts, policy.fitter, snap.recent, snap.count)
    needed = fixed_tokens + sum(snap.turn_tokens(t, cost) for t in snap.in_place(len(snap.recent))
                                if t.id not in gone)
    short = needed - limit
    raise BudgetError(
        f"the context needs at least {needed} tokens for system, pinned and in-place turns, but the budget "
        f"allows {limit}: short by {short}. Raise the budget or unpin turns.", shortfall=short)


def _fitted_tiers(want: Sequence[Tier], costs: Sequence[PageCost], policy: Policy, cap: int | None,
                  last: Sequence[Tier], room: int) -> list[Tier]:
    """The tiers the fitter gives within `room`, at most `cap` images, none sharper than `last`
    time where tiers are sticky."""
    tiers = cap_images(fit(want, costs, room, policy.fitter), costs, cap)
    return never_sharper(tiers, last) if policy.sticky else tiers


def give_way(snap: Snapshot, room: int, cost: CostModel) -> frozenset[int]:
    """The person's messages that stay text in place (`turnindex.WORDS`) left out, oldest first,
    until those in place fit `room` with every recent turn on pages; none while they fit. Other
    turns in place (system and developer messages, turns kept as sent) never give way."""
    in_place = snap.in_place(len(snap.recent))
    over = sum(snap.turn_tokens(t, cost) for t in in_place) - room
    gone: set[int] = set()
    for t in in_place:
        if over <= 0:
            break
        if WORDS in t.metadata:
            gone.add(t.id)  # type: ignore[arg-type]
            over -= snap.turn_tokens(t, cost)
    return frozenset(gone)


def as_it_came(snap: Snapshot, original: int, limit: int, image_cap: int | None) -> Plan | None:
    """Step 0: every turn as itself, in order, when the whole conversation fits the budget and the
    consumer's images-per-request cap, and no tool result comes without its call before it (the
    API would refuse it): nothing needs compressing."""
    if original > limit or snap.transcript is None or (image_cap is not None and len(snap.all_images) > image_cap):
        return None
    if safe_cuts([t for t in snap.transcript if t.role != "system" and not t.pinned])[0] != 0:
        return None
    return Plan(len(snap.recent), [], [], [], original, 0, verbatim=snap.transcript)


def safe_cuts(recent: Sequence[Turn]) -> list[int]:
    """Indices i where recent[:i] may go to pages and recent[i:] stay native text without a tool
    result losing its call: no tool turn at or after i answers a call made before i, and none
    answers a call that is not among the recent turns at all."""
    n = len(recent)
    blocked = [0] * (n + 2)  # difference array over cut positions
    call_at: dict[str, int] = {}
    for b, t in enumerate(recent):
        for cid in t.call_ids:
            call_at[cid] = b
        if t.role == "tool":
            a = call_at.get(t.tool_call_id or "")
            lo = 0 if a is None else a + 1
            blocked[lo] += 1
            blocked[b + 1] -= 1
    cuts, run = [], 0
    for i in range(n + 1):
        run += blocked[i]
        if run == 0:
            cuts.append(i)
    return cuts


def overflow(recent: Sequence[Turn], keep_recent: int, restored_upto: int) -> int:
    """How many of the oldest recent turns go onto pages: all but `keep_recent`, at a safe cut;
    never fewer than those already on restored pages (they go back onto them, whatever
    keep_recent is now)."""
    cuts = safe_cuts(recent)
    cut = max([c for c in cuts if c <= len(recent) - keep_recent] + [cuts[0]])
    on_pages = sum(1 for t in recent if t.id <= restored_upto)  # type: ignore[operator]
    return cut if cut >= on_pages else min(c for c in cuts if c >= on_pages)


def price_pages(pages: Sequence[Page], snap: Snapshot, cost: CostModel) -> list[PageCost]:
    """Every page's cost per tier: sealed pages by their counted text and the gate's floor, pages
    a preview fills by counting theirs (they change with every turn)."""
    sealed = len(snap.pack.sealed)
    floors = [*(snap.floors or [Tier.GONE] * sealed), *[Tier.GONE] * (len(pages) - sealed)]
    tokens = [p.tokens if p.tokens is not None else snap.count(p.text) for p in pages]
    return page_costs(tokens, cost, floors, snap.pack.layout.config.master)


def fit(tiers: Sequence[Tier], costs: Sequence[PageCost], room: int, fitter: Fitter) -> list[Tier]:
    """The fitter's tiers within `room`; every page dropped when not even the caption fits (with
    no page shown, none is needed)."""
    fitted = fitter.fit(tiers, costs, room) if room >= 0 else None
    return fitted if fitted is not None else [Tier.GONE] * len(tiers)


def cap_images(tiers: Sequence[Tier], costs: Sequence[PageCost], cap: int | None) -> list[Tier]:
    """At most `cap` pages sent as images: the oldest beyond it are dropped (the budget only shrinks)."""
    out = list(tiers)
    if cap is None:
        return out
    imaged = [i for i, (c, t) in enumerate(zip(costs, tiers)) if c.actual(t).is_image]
    for i in imaged[: max(0, len(imaged) - cap)]:
        out[i] = Tier.GONE
    return out


def never_sharper(tiers: Sequence[Tier], last: Sequence[Tier]) -> list[Tier]:
    """No page sharper than it was `last` time (its first len(last) pages, sealed then). Both are
    monotone in age, so their minimum is too, and it costs no more: the budget still holds."""
    out = list(tiers)
    for i, was in enumerate(last[: len(out)]):
        if out[i].rank > was.rank:
            out[i] = was
    return out
