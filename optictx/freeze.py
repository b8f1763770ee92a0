"""Freezing: what a frozen state (`Frozen`) sends on a later snapshot, and a stateless plan cut
and frozen at a compaction (`prefix.py` decides when). A frozen state names its pages by digest,
so it is checked against the memory's own pages on every call and is never trusted blindly."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .cost import CostModel
from .packer import PackView, Page
from .plan import Snapshot, safe_cuts
from .planned import Plan
from .planstate import Frozen
from .schedule import page_costs
from .tiers import Tier

# A snapshot whose recent turns are every turn (but system and pinned ones) from an id on.
Since = Callable[[int], Snapshot]


def frozen_plan(state: Frozen, snap: Snapshot, cost: CostModel) -> tuple[Snapshot, Plan] | None:
    """The plan a frozen state gives on a snapshot whose recent turns are those since
    `state.upto`; None when its pages are not this memory's sealed pages (other settings)."""
    pages = frozen_pages(state, snap.pack)
    if pages is None:
        return None
    tiers = [t for _, t in state.pages]
    costs = page_costs([p.tokens or snap.count(p.text) for p in pages], cost, master=snap.pack.layout.config.master)
    other = sum(snap.turn_tokens(t, cost) for t in (*snap.system, *snap.pinned, *snap.inline, *snap.recent))
    caption = snap.count(snap.caption)
    return snap, Plan(0, pages, tiers, costs, other, caption, dict(state.factsheet), drawn=False, count=snap.count)


def frozen_pages(state: Frozen, pack: PackView) -> list[Page] | None:
    """The pages a frozen state sends, from the packer's: its first sealed pages, the last of
    them cut to its first `state.part` lines where it was frozen open; None when they are not
    this memory's pages (other settings, or lines an open page no longer starts with)."""
    whole = len(state.pages) - (1 if state.part else 0)
    if whole > len(pack.sealed):
        return None
    pages = list(pack.sealed[:whole])
    if state.part:
        lines = pack.sealed[whole].entries if whole < len(pack.sealed) else pack.open_entries
        if len(lines) < state.part:
            return None
        pages.append(Page(whole, tuple(lines[: state.part]), False, pack.style))
    if any(p.digest != d for p, (d, _) in zip(pages, state.pages)):
        return None
    return pages


def factsheet_tokens(snap: Snapshot, p: Plan) -> int:
    return sum(snap.count(text) for text in p.factsheet.values())


def plan_images(snap: Snapshot, p: Plan) -> int:
    return sum(1 for t in p.actual if t.is_image) + snap.image_count(
        [*snap.system, *snap.pinned, *snap.inline, *snap.recent])


def freeze(stateless: Plan, pack: PackView, tail: Since, fixed: tuple[int, ...]) -> Frozen | None:
    """The stateless plan's sealed pages up to its last one not sent as text, at their tiers, and
    the first turn that is not wholly on them (moved back so no tool result loses its call). Where
    the plan draws the open page, that page too, frozen as it stands with every turn on it (a
    budget too small for its lines as text would drop sealed pages to make room for them)."""
    sealed = len(pack.sealed)
    part = len(pack.open_entries) if _open_imaged(stateless, pack) else 0
    if part:
        pages = [*pack.sealed, stateless.pages[sealed]]
        start = pages[-1].entries[-1].turn_id + 1
    else:
        m = 1 + max((i for i, t in enumerate(stateless.actual[:sealed]) if t is not Tier.TEXT), default=-1)
        pages = list(pack.sealed[:m])
        start = _first_after(pages, pack) if m else 0
    upto = _safe_start(start, tail)
    if upto is None:
        return None
    factsheet = tuple(sorted((place, text) for place, text in stateless.factsheet.items() if place < len(pages)))
    return Frozen(pages=tuple((p.digest, t) for p, t in zip(pages, stateless.actual)), factsheet=factsheet, upto=upto,
                  fixed=fixed, part=part)


def _open_imaged(stateless: Plan, pack: PackView) -> bool:
    """Whether the stateless plan draws the open page as it stands (no recent turn added to it)
    on an image."""
    sealed = len(pack.sealed)
    return (stateless.cut == 0 and len(stateless.pages) == sealed + 1 and bool(pack.open_entries)
            and stateless.actual[sealed].is_image and stateless.pages[sealed].entries == pack.open_entries)


def _first_after(pages: Sequence[Page], pack: PackView) -> int:
    """The first turn id not wholly on `pages` (the first sealed pages of `pack`)."""
    last = pages[-1].entries[-1].turn_id
    rest = pack.sealed[len(pages):]
    following = rest[0].entries[0] if rest else (pack.open_entries[0] if pack.open_entries else None)
    return last if following is not None and following.turn_id == last else last + 1


def _safe_start(upto: int, tail: Since) -> int | None:
    """`upto`, or an earlier turn id, so that no tool result from it on lacks its call; None
    when there is none (a tool result answers a call never made: such a conversation is
    planned afresh, where that result goes on a page)."""
    window = list(tail(max(0, upto - 64)).recent)
    cuts = safe_cuts(window)
    ids = [t.id for t in window]
    at = next((i for i, tid in enumerate(ids) if tid is not None and tid >= upto), len(ids))
    ok = [c for c in cuts if c <= at]
    if not ok:
        return None
    return ids[max(ok)] if max(ok) < len(ids) else upto  # type: ignore[return-value]
