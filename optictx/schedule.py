"""Scheduling strategies: what each tier of a page costs, decay ladders and budget fitters.

Two kinds of small strategy, each behind one method (`Ladder`, `Fitter`): a decay
ladder (tier by page age) and a fitter (demote until the budget holds). `plan.plan` runs them;
every invariant they keep is a property test run over every policy (tests/test_schedule.py):
- decay is monotone: a newer page never has a lower tier than an older one (in scheduled tiers;
  a legibility gate may then raise a page to the floor it needs, see `PageCost`);
- an image tier is used only where it costs less than the page's text;
- the result fits the limit, or the scheduler says it cannot (None).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol

from .cost import CostModel
from .errors import ConfigError
from .handles import LABEL_TOKENS
from .tiers import IMAGE_TIERS, MASTER, Tier


class Ladder(Protocol):
    """Decay by age: the tier each page wants before the budget is looked at."""

    def tiers(self, n: int, *, unsealed: int = 0) -> list[Tier]:
        """Tiers for `n` pages, oldest first, the newest `unsealed` of them not sealed yet; never
        sharper with age."""
        ...


class Fitter(Protocol):
    """Budget fitting: demote or drop pages until they fit."""

    def fit(self, tiers: Sequence[Tier], costs: Sequence[PageCost], room: int) -> list[Tier] | None:
        """New tiers (the input is not changed), each at or below the one given, monotone in age,
        costing at most `room`; None only when `room` < 0 (every page GONE fits any room >= 0)."""
        ...


@dataclass(frozen=True, eq=False)
class PageCost:
    """What each tier of one page costs; `options` are the tiers it may take, sharpest first.

    `floor` is the least sharp tier a legibility gate found readable (GONE: no gate). Tiers the
    scheduler picks below it are *virtual*: they stand for the floor (`actual`) and cost what the
    floor costs, so the ladder, the fitter and the monotone rule work unchanged on virtual tiers
    while every page actually sent stays legible. A floor whose image does not pay is TEXT.

    The lookups the fitter makes per step are precomputed: a context over a thousand pages runs
    tens of thousands of them.
    """

    text_tokens: int
    costs: Mapping[Tier, int]
    floor: Tier = Tier.GONE
    sent_as: Mapping[Tier, Tier] = field(default_factory=dict)  # `CostModel.sent_as`: tiers sent as another
    options: tuple[Tier, ...] = field(init=False)
    _cost: dict[Tier, int] = field(init=False, repr=False)
    _below: dict[Tier, Tier] = field(init=False, repr=False)
    _actual: dict[Tier, Tier] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        real = {Tier.TEXT: self.text_tokens, Tier.GONE: 0, **self.costs}
        floor = self.floor
        if floor.is_image and real[floor] >= self.text_tokens:
            floor = Tier.TEXT  # the legible image costs more than the text: send the text
        actual = {t: floor if t.is_image and t.rank < floor.rank else t for t in Tier}
        actual = {t: self.sent_as.get(a, a) for t, a in actual.items()}
        cost = {t: real[actual[t]] for t in Tier}
        paying = tuple(t for t in IMAGE_TIERS if actual[t] is Tier.TEXT or cost[t] < self.text_tokens)
        options = (Tier.TEXT, *paying, Tier.GONE)
        below = {t: next(u for u in options if u.rank < t.rank and cost[u] < cost[t])
                 for t in options if t is not Tier.GONE}
        object.__setattr__(self, "options", options)
        object.__setattr__(self, "_cost", cost)
        object.__setattr__(self, "_below", below)
        object.__setattr__(self, "_actual", actual)

    def cost(self, tier: Tier) -> int:
        return self._cost[tier]

    def actual(self, tier: Tier) -> Tier:
        """The tier sent for a scheduled (possibly virtual) tier: itself, or the gate's floor, or
        the tier the consumer sees it as (`sent_as`)."""
        return self._actual[tier]

    def best_at_most(self, rank: int) -> Tier:
        """The sharpest option whose rank is <= `rank` (GONE at worst)."""
        return next(t for t in self.options if t.rank <= rank)

    def below(self, tier: Tier) -> Tier:
        """The next option below `tier` that is strictly cheaper (GONE at worst)."""
        return self._below[tier]


@lru_cache(maxsize=8192)
def _page_cost(text_tokens: int, per_tier: tuple[tuple[Tier, int], ...], floor: Tier,
               sent_as: tuple[tuple[Tier, Tier], ...]) -> PageCost:
    return PageCost(text_tokens, dict(per_tier), floor, dict(sent_as))


def page_costs(text_tokens: Sequence[int], model: CostModel, floors: Sequence[Tier] | None = None,
               master: int | tuple[int, int] = MASTER) -> list[PageCost]:
    """Cost tables for pages of these text sizes (and gate floors), drawn `master` px (square
    where one number);
    equal ones share one table."""
    # An image page is sent with its label beside it (`handles.label`), planned at its most.
    per_tier = tuple((t, model.page_tokens(t, master) + LABEL_TOKENS) for t in IMAGE_TIERS)  # the same for all
    sent_as = tuple(model.sent_as(master).items())
    floors = floors or [Tier.GONE] * len(text_tokens)
    return [_page_cost(n, per_tier, f, sent_as) for n, f in zip(text_tokens, floors)]


@dataclass(frozen=True)
class AgeLadder:
    """Tier by age, newest page first: `steps` = ((count, tier), ...), then `rest` for older pages.

    Pages not sealed yet (the open page, and pages a context fills from recent turns) want
    `unsealed` and take no place on the ladder: they change with every turn, so as text they
    leave the prompt before them, its image encodings and its KV untouched, and nothing has to be
    drawn again per turn (`benchmarks/local_model.py`). `unsealed=None` puts them on the ladder.

    >>> AgeLadder().tiers(4)  # oldest first
    [<Tier.SMALL: 'small'>, <Tier.BASE: 'base'>, <Tier.BASE: 'base'>, <Tier.LARGE: 'large'>]
    >>> AgeLadder().tiers(3, unsealed=1)
    [<Tier.BASE: 'base'>, <Tier.LARGE: 'large'>, <Tier.TEXT: 'text'>]
    """

    steps: tuple[tuple[int, Tier], ...] = ((1, Tier.LARGE), (2, Tier.BASE), (4, Tier.SMALL))
    rest: Tier = Tier.TINY
    # Tiers move only every `hold` pages: until a block of `hold` new pages is complete, the new
    # ones take the newest step's tier and older pages keep theirs. Every tier change re-encodes a
    # page and breaks a prompt prefix cache (a local model's KV, a provider's prompt cache) at that
    # page, so holding trades a few sharper (costlier) pages for a prefix that stays put
    # (BENCHMARKS.md, "Local optical model": prefill per call and prompt size per `hold`).
    hold: int = 2
    unsealed: Tier | None = Tier.TEXT

    def __post_init__(self) -> None:
        ranks = [t.rank for _, t in self.steps] + [self.rest.rank]
        if self.unsealed is not None:
            ranks.insert(0, self.unsealed.rank)
        if any(b > a for a, b in itertools.pairwise(ranks)):
            raise ConfigError("AgeLadder steps must not get sharper with age (newest step first)")
        if self.hold < 1:
            raise ConfigError(f"AgeLadder hold must be >= 1, got {self.hold}")

    def tiers(self, n: int, *, unsealed: int = 0) -> list[Tier]:
        """Tiers for `n` pages, oldest first, the newest `unsealed` of them not sealed yet."""
        if self.unsealed is not None and unsealed:
            return self.tiers(n - unsealed) + [self.unsealed] * unsealed
        settled = n - n % self.hold  # pages aged as if the newest, incomplete block were not there
        newest_first: list[Tier] = []
        for count, tier in self.steps:
            newest_first.extend([tier] * count)
        newest_first = newest_first[:settled] + [self.rest] * max(0, settled - len(newest_first))
        fresh = self.steps[0][1] if self.steps else self.rest
        return newest_first[::-1] + [fresh] * (n - settled)


@dataclass(frozen=True)
class OldestFirst:
    """Demote the oldest pages one step at a time, `batch` pages at once (aligned blocks of page
    indices), so a demotion frees room for several later pages and the prefix changes rarely.

    With `shrink_first` (the default) every page is first shrunk to its least sharp visible tier,
    oldest first, and only then are pages dropped: a dropped page loses all its text, a TINY one
    still reads nearly all of it, and the pages the ladder keeps sharp cost as much as many TINY
    ones. `shrink_first=False` keeps the newest pages sharp and drops old ones sooner, which kept
    fewer needles (BENCHMARKS.md, "Needle in a haystack").
    """

    batch: int = 4
    shrink_first: bool = True

    def fit(self, tiers: Sequence[Tier], costs: Sequence[PageCost], room: int) -> list[Tier] | None:
        """Tiers within `room`, or None if even all-GONE is too much (room < 0)."""
        tiers = list(tiers)
        total = sum(c.cost(t) for c, t in zip(costs, tiers))
        if self.shrink_first:
            total = self._shrink(tiers, costs, room, total)
        if total <= room:
            return tiers
        first, before = 0, list(tiers)  # every page before `first` is GONE; the tiers before any drop
        while total > room:
            while first < len(tiers) and tiers[first] is Tier.GONE:
                first += 1
            if first == len(tiers):
                return None
            total += self._step(tiers, costs, first, drop=True)
        return self._give_back(tiers, before, costs, room - total)

    def _give_back(self, tiers: list[Tier], before: Sequence[Tier], costs: Sequence[PageCost], left: int
                   ) -> list[Tier]:
        """Under a small budget, the newest dropped pages again, as they were before the drops,
        while they fit what is `left`: dropping a whole block keeps the front still for the next
        pages, but where fewer than a block of pages is left shown it leaves most of the room
        unused (four TINY pages dropped where three would fit the room)."""
        shown = sum(t is not Tier.GONE for t in tiers)
        i = len(tiers) - shown - 1  # the newest page dropped: tiers are monotone, so the dropped are the oldest
        while shown < self.batch and i >= 0:
            newer = tiers[i + 1].rank if i + 1 < len(tiers) else Tier.TEXT.rank
            tier = costs[i].best_at_most(min(before[i].rank, newer))  # never sharper than the page after it
            if tier is Tier.GONE or costs[i].cost(tier) > left:
                break
            tiers[i], left, shown, i = tier, left - costs[i].cost(tier), shown + 1, i - 1
        return tiers

    def _shrink(self, tiers: list[Tier], costs: Sequence[PageCost], room: int, total: int) -> int:
        """Demote, oldest first, every page that can go lower without being dropped; the new total."""
        first = 0  # every page before `first` is at its least sharp visible tier (or GONE)
        while total > room:
            while first < len(tiers) and (tiers[first] is Tier.GONE or costs[first].below(tiers[first]) is Tier.GONE):
                first += 1
            if first == len(tiers):
                break
            total += self._step(tiers, costs, first, drop=False)
        return total

    def _step(self, tiers: list[Tier], costs: Sequence[PageCost], first: int, *, drop: bool) -> int:
        """One step down for the block holding page `first`, from `first` on; the cost change."""
        end = min(len(tiers), (first // self.batch + 1) * self.batch)
        delta = 0
        for i in range(first, end):
            new = costs[i].below(tiers[i]) if tiers[i] is not Tier.GONE else Tier.GONE
            if new is not Tier.GONE or drop:
                delta += costs[i].cost(new) - costs[i].cost(tiers[i])
                tiers[i] = new
        # Pages shrunk newer than a gated page (which cannot shrink) pull its scheduled tier down
        # to a virtual one of the same cost; pages dropped pull older ones with them.
        return delta + _monotone_older(tiers, costs, 0 if not drop else first, end)


def _monotone_older(tiers: list[Tier], costs: Sequence[PageCost], start: int, end: int) -> int:
    """Make tiers[start:end] monotone against tiers[end] (newest to oldest); returns the cost change."""
    delta = 0
    newer = tiers[end].rank if end < len(tiers) else Tier.TEXT.rank
    for i in range(end - 1, start - 1, -1):
        if tiers[i].rank > newer:
            new = costs[i].best_at_most(newer)
            delta += costs[i].cost(new) - costs[i].cost(tiers[i])
            tiers[i] = new
        newer = tiers[i].rank
    return delta


@dataclass(frozen=True)
class DropOldest:
    """Keep the ladder's tiers and drop whole pages, oldest first, until the budget holds: the
    newest pages stay as sharp as the ladder wants (a second fitter, run through the same
    invariant tests as `OldestFirst`)."""

    def fit(self, tiers: Sequence[Tier], costs: Sequence[PageCost], room: int) -> list[Tier] | None:
        """Tiers within `room`, or None if even all-GONE is too much (room < 0)."""
        if room < 0:
            return None
        out = list(tiers)
        total = sum(c.cost(t) for c, t in zip(costs, out))
        for i in range(len(out)):
            if total <= room:
                break
            total -= costs[i].cost(out[i])
            out[i] = Tier.GONE
        return out


def ladder_tiers(costs: Sequence[PageCost], ladder: Ladder, *, unsealed: int = 0) -> list[Tier]:
    """The tier the ladder wants for each page (oldest first, the newest `unsealed` not sealed
    yet), an image only where it pays, made monotone in age."""
    tiers = []
    for cost, want in zip(costs, ladder.tiers(len(costs), unsealed=unsealed)):
        # An image only where it pays: otherwise the page's text is cheaper and sharper.
        tiers.append(want if want in cost.options else Tier.TEXT)
    _monotone_older(tiers, costs, 0, len(tiers))
    return tiers
