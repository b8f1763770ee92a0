"""Plan: what planning decides for one context (which recent turns join the pages, every page's
tier, the factsheet's texts by place), a value the planning steps pass along (`plan.py`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

from .packer import Entry, Page
from .schedule import PageCost
from .tiers import Tier
from .turns import Turn


@dataclass(frozen=True)
class Plan:
    """One planning outcome: recent[:cut] joins the pages, a tier for every page, and the
    factsheet's texts by place (-1: before the first page; i: right after page i)."""

    cut: int
    pages: list[Page]
    tiers: list[Tier]
    costs: list[PageCost]
    other_tokens: int  # fixed and recent text
    caption_tokens: int
    factsheet: Mapping[int, str] = field(default_factory=dict)
    verbatim: tuple[Turn, ...] | None = None  # set: every turn goes as itself in this order, nothing else
    drawn: bool = True  # recent turns' flat prompts as a page draws them (False: as themselves, prefix.py)
    left_out: tuple[int, ...] = ()  # the person's messages that stay in place but the budget cannot hold
    count: Callable[[str], int] | None = field(default=None, repr=False, compare=False)  # text tokens (`again`)

    @cached_property
    def actual(self) -> list[Tier]:
        """The tier each page is sent at: `tiers` are scheduled, possibly below a gate's floor."""
        return [c.actual(t) for c, t in zip(self.costs, self.tiers)]

    @cached_property
    def page_tokens(self) -> int:
        return sum(c.cost(t) for c, t in zip(self.costs, self.tiers))

    @cached_property
    def tokens(self) -> int:
        """Everything but the factsheet."""
        imaged = any(t is not Tier.GONE for t in self.tiers)
        caption = self.caption_tokens if imaged or self.left_out else 0
        return self.other_tokens + self.page_tokens + caption + self.again_tokens

    @cached_property
    def again(self) -> dict[int, str]:
        """Page i -> the lines its references to pages not sent stand for, written again after it:
        a reference to another page (`repeats.py`) holds only while that page is in the context.
        Lines already written again after an earlier page are not written a second time: the
        reference reads the same there (a conversation that repeats itself refers to one page's
        lines from dozens of pages)."""
        out: dict[int, str] = {}
        if Tier.GONE not in self.actual:
            return out
        written: set[tuple[object, int]] = set()
        for i, (page, tier) in enumerate(zip(self.pages, self.actual)):
            if tier is Tier.GONE or not page.refers:
                continue
            refs = [e for e in page.refers if self.actual[e.source[0]] is Tier.GONE  # type: ignore[index]
                    and (e.source, e.covers) not in written]
            written.update((e.source, e.covers) for e in refs)
            if refs:
                out[i] = "\n".join(again(e, self.pages[e.source[0]]) for e in refs)  # type: ignore[index]
        return out

    @cached_property
    def shown(self) -> int:
        """Pages sent, as images or text."""
        return sum(t is not Tier.GONE for t in self.tiers)

    @cached_property
    def again_tokens(self) -> int:
        return sum(map(self.count, self.again.values())) if self.again and self.count else 0

    @cached_property
    def shown_by(self) -> dict[int, int]:
        """Turn id -> index of the last sealed page sent as an image that shows it (turns on the
        open page, on text pages or only on dropped pages are not keys): the factsheet's imaged
        turns, and where their lines go."""
        return {tid: i for i, (p, t) in enumerate(zip(self.pages, self.actual)) if t.is_image and p.sealed
                for tid in p.turn_ids}

    def refit(self, tiers_for: Callable[[int], list[Tier]], room: int) -> Plan:
        """The plan with `tiers_for(room)` less the room the lines written again then take
        (`again`), asked again until they fit. Where that does not settle (each fit drops pages
        whose lines the pages after them then need written again: a conversation that repeats
        itself), the newest pages of the first fit, as many as fit with the lines they need
        written again (at worst none, and nothing then refers to a page not sent)."""
        first = tiers = tiers_for(room)
        held, settled = 0, None
        for _ in range(len(self.pages) + 1):
            fitted = self.with_tiers(tiers)
            if fitted.again_tokens <= held:
                if not held:  # the first fit, nothing written again: no plan shows more (most calls)
                    return fitted
                settled = fitted
                break
            held = fitted.again_tokens
            tiers = tiers_for(room - held)
        newest = self.newest_that_fit(first, room)
        return settled if settled is not None and settled.shown >= newest.shown else newest

    def newest_that_fit(self, tiers: list[Tier], room: int) -> Plan:
        """`tiers` with their oldest shown pages dropped one by one until the pages and the
        lines written again for them fit `room`."""
        tiers = list(tiers)
        for i in [i for i, t in enumerate(tiers) if t is not Tier.GONE]:
            trial = self.with_tiers(list(tiers))
            if trial.page_tokens + trial.again_tokens <= room:
                return trial
            tiers[i] = Tier.GONE
        return self.with_tiers(tiers)  # none shown: nothing refers to a page not sent

    def with_tiers(self, tiers: list[Tier]) -> Plan:
        return Plan(self.cut, self.pages, tiers, self.costs, self.other_tokens, self.caption_tokens,
                    drawn=self.drawn, left_out=self.left_out, count=self.count)

    def with_factsheet(self, parts: Mapping[int, str]) -> Plan:
        new = Plan(self.cut, self.pages, self.tiers, self.costs, self.other_tokens, self.caption_tokens, parts,
                   drawn=self.drawn, left_out=self.left_out, count=self.count)
        # The same tiers: what was derived from them holds (recomputing it walks every page).
        new.__dict__.update({k: v for k, v in self.__dict__.items() if k in _DERIVED})
        return new


_DERIVED = ("actual", "page_tokens", "tokens", "shown_by", "again", "again_tokens")


def again(ref: Entry, source: Page) -> str:
    """A reference line, then the lines it stands for on `source` (a page not sent)."""
    at = ref.source[1]  # type: ignore[index]
    lines = "\n".join(e.line.text for e in source.entries[at : at + ref.covers])
    return f"{ref.line.text} (page {source.handle} is not shown; the lines:)\n{lines}"
