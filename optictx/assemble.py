"""Assembly: a plan becomes a Context, every segment's text and tokens computed now, so the
context is a plain value that stays valid while the memory moves on."""

from __future__ import annotations

from .budget import Budget
from .context import Context
from .cost import CostModel
from .handles import LABEL_TOKENS, label
from .images import PageImages
from .pieces import PageSegment, Segment, TextSegment, left_out
from .plan import Snapshot
from .planned import Plan
from .tiers import Tier


def assemble(snap: Snapshot, plan: Plan, budget: Budget, cost: CostModel, images: PageImages) -> Context:
    """System and pinned turns, the caption, pages with their factsheet parts and the turns that
    stay text in place after the page that shows where they were, recent turns; or, for a
    verbatim plan, every turn as itself in the order it came."""
    if plan.verbatim is not None:
        kinds = {t.id: k for k, ts in (("system", snap.system), ("pinned", snap.pinned)) for t in ts}
        whole = tuple(TextSegment(kinds.get(t.id, "recent"), t.text, snap.turn_tokens(t, cost), t)  # type: ignore[arg-type]
                      for t in plan.verbatim)
        return Context(whole, budget, cost, verbatim=True)
    segs: list[Segment] = [TextSegment("system", t.text, snap.turn_tokens(t, cost), t) for t in snap.system]
    segs += [TextSegment("pinned", t.text, snap.turn_tokens(t, cost), t) for t in snap.pinned]

    def factsheet(place: int) -> None:
        if place in plan.factsheet:
            text = plan.factsheet[place]
            segs.append(TextSegment("factsheet", text, snap.count(text)))

    imaged = any(t is not Tier.GONE for t in plan.actual)
    if imaged or plan.left_out:  # with no page shown, the caption only says what was left out
        text = (snap.caption if imaged else "") + (left_out(plan.left_out) if plan.left_out else "")
        segs.append(TextSegment("caption", text.strip(), plan.caption_tokens))
    factsheet(-1)
    in_place = [t for t in snap.in_place(plan.cut) if t.id not in plan.left_out]
    master = snap.pack.layout.config.master

    def inline(before: int | None) -> None:  # the turns in place with ids below `before` (None: all)
        while in_place and (before is None or in_place[0].id < before):  # type: ignore[operator]
            t = in_place.pop(0)
            segs.append(TextSegment("inline", t.text, snap.turn_tokens(t, cost), t))

    if plan.pages:  # pages stored before a turn stayed in place do not show its line
        inline(plan.pages[0].entries[0].turn_id)
    for i, (page, tier, price) in enumerate(zip(plan.pages, plan.actual, plan.costs)):
        if tier is Tier.GONE and not in_place and i not in plan.again:
            continue  # nothing of it goes, and no turn stays in place after it: a long memory's most pages
        if tier is Tier.TEXT:
            segs.append(PageSegment(page, tier, price.cost(tier), price.text_tokens, images))
        elif tier is not Tier.GONE:  # an image, its label beside it (planned with it, at its most)
            if page.handle is not None:
                text = label(page.handle, page.turn_ids)
                segs.append(TextSegment("label", text, snap.count(text)))
            paper = cost.paper_tokens(tier, cost.tier_size(tier, master))
            segs.append(PageSegment(page, tier, price.cost(tier) - LABEL_TOKENS, paper, images))
        # In place: after the last page that starts before it (one that shows its line), the
        # page sent or not.
        inline(plan.pages[i + 1].entries[0].turn_id if i + 1 < len(plan.pages) else None)
        if tier is not Tier.GONE:
            factsheet(i)
        if i in plan.again:  # lines a reference on it stands for, on a page not sent
            segs.append(TextSegment("copies", plan.again[i], snap.count(plan.again[i])))
    inline(None)  # no page at all
    segs += [TextSegment("recent", t.text, snap.turn_tokens(t, cost), t, snap.pack.drawn(t) if plan.drawn else None)
             for t in snap.recent[plan.cut:]]
    gone = tuple(p for p, t in zip(plan.pages, plan.actual) if t is Tier.GONE)
    return Context(tuple(segs), budget, cost, gone)
