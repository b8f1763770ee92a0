"""A plan: which recent turns join the pages and the tier of every page, with the rules that cut
and cap it (tool pairs kept whole, image caps, sticky tiers)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from .packer import Page
from .schedule import PageCost
from .tiers import Tier
from .turns import Turn


def safe_cuts(window: Sequence[Turn]) -> list[int]:
    """Indices i where window[:i] may go to pages and window[i:] stay native text without a tool
    result losing its call: no tool turn at or after i answers a call made before i, and none
    answers a call that is not in the window at all."""
    n = len(window)
    blocked = [0] * (n + 2)  # difference array over cut positions
    call_at: dict[str, int] = {}
    for b, t in enumerate(window):
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


@dataclass(frozen=True)
class Plan:
    """One scheduling outcome: window[:cut] joins the pages, and a tier for every page."""

    cut: int
    pages: list[Page]
    tiers: list[Tier]
    costs: list[PageCost]
    other_tokens: int  # fixed and recent text
    caption_tokens: int

    @cached_property
    def sent(self) -> list[Tier]:
        """The tier each page is sent at: `tiers` are scheduled, possibly below a gate's floor."""
        return [c.actual(t) for c, t in zip(self.costs, self.tiers)]

    @cached_property
    def page_tokens(self) -> int:
        return sum(c.cost(t) for c, t in zip(self.costs, self.tiers))

    @cached_property
    def tokens(self) -> int:
        """Everything but the factsheet."""
        imaged = any(t is not Tier.GONE for t in self.tiers)
        return self.other_tokens + self.page_tokens + (self.caption_tokens if imaged else 0)

    @cached_property
    def shown_by(self) -> dict[int, int]:
        """Turn id -> index of the last sealed page sent as an image that shows it (turns on the
        open page, on text pages or only on dropped pages are not keys): the factsheet's imaged
        turns, and where their lines go."""
        return {tid: i for i, (p, t) in enumerate(zip(self.pages, self.sent)) if t.is_image and p.sealed
                for tid in p.turn_ids}

    def with_tiers(self, tiers: list[Tier]) -> Plan:
        return Plan(self.cut, self.pages, tiers, self.costs, self.other_tokens, self.caption_tokens)


def cap_at(tiers: list[Tier], last: Sequence[Tier]) -> None:
    """No page sharper than it was `last` time (its first len(last) pages, sealed then). Both are
    monotone in age, so their minimum is too, and it costs no more: the budget still holds."""
    for i, was in enumerate(last[: len(tiers)]):
        if tiers[i].rank > was.rank:
            tiers[i] = was


def cap_images(tiers: list[Tier], costs: Sequence[PageCost], cap: int) -> list[Tier]:
    """At most `cap` pages sent as images: the oldest beyond it are dropped (the budget only shrinks)."""
    imaged = [i for i, (c, t) in enumerate(zip(costs, tiers)) if c.actual(t).is_image]
    out = list(tiers)
    for i in imaged[: max(0, len(imaged) - cap)]:
        out[i] = Tier.GONE
    return out
