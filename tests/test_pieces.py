"""A context is a plain value made of prompt pieces: every exporter and the local model write the
same pieces, and prefix reuse is the longest run of equal keys (no torch needed here)."""

from __future__ import annotations

from optictx import Budget, Memory, Tier
from optictx.pieces import PageSegment, common_prefix


def _grown(sample, n, **kw):
    """A memory planning each context afresh (`cache=False`): the pieces of the stateless plan,
    the open page's among them (tests/test_prefix.py holds the append-only planner)."""
    kw.setdefault("cache", False)
    mem = Memory(budget=Budget(tokens=kw.pop("tokens", 8192)), keep_recent=kw.pop("keep_recent", 4), **kw)
    for m in sample[:n]:
        mem.add(m)
    return mem


def test_pieces_cover_every_segment_in_order_and_join_to_its_text(sample):
    ctx = _grown(sample, 260).context()
    assert [p.segment for p in ctx.pieces] == sorted(p.segment for p in ctx.pieces)
    assert {p.segment for p in ctx.pieces} == set(range(len(ctx.segments)))
    for i, seg in enumerate(ctx.segments):
        mine = [p for p in ctx.pieces if p.segment == i]
        if isinstance(seg, PageSegment) and seg.tier.is_image:
            assert [p.image for p in mine] == [seg] and mine[0].key == f"p:{seg.page.digest}:{seg.tier.value}"
        else:
            assert "\n".join(p.text for p in mine) == seg.text
        assert all(p.prompt.endswith("\n") for p in mine)
    assert [p.kind for p in ctx.pieces].count("open") >= 1  # the open page: a piece per turn on it
    assert any(p.kind == "factsheet" for p in ctx.pieces)


def test_a_context_stays_valid_after_its_memory_moves_on_and_closes(sample, tmp_path):
    mem = _grown(sample, 200, store=tmp_path / "m.db")
    ctx = mem.context()
    before = (ctx.to_openai(), ctx.to_anthropic(), [p.key for p in ctx.pieces], ctx.tokens)
    for m in sample[200:260]:
        mem.add(m)
    mem.close()  # no store, no lock: the context still has everything it says
    assert (ctx.to_openai(), ctx.to_anthropic(), [p.key for p in ctx.pieces], ctx.tokens) == before


def test_the_prompt_only_grows_at_its_end_while_no_page_seals(sample):
    """Over a session within budget, a turn that seals no page keeps every piece of the previous
    context as the start of the next (the turn leaving the recent turns joins the open page as
    the same lines), so a prefix cache reuses all of it."""
    mem = Memory(budget=Budget(tokens=50_000), keep_recent=2)
    prev, whole, calls = None, 0, 0
    for m in sample[:200]:
        sealed = len([p for p in mem.pages if p.sealed])
        mem.add(m)
        ctx = mem.context()
        if prev is not None and len([p for p in mem.pages if p.sealed]) == sealed and sealed:
            calls += 1
            whole += common_prefix(prev.pieces, ctx.pieces) == len(prev.pieces)
        prev = ctx
    assert calls > 100 and whole == calls, (whole, calls)


def test_a_fade_changes_the_faded_pages_piece_and_no_page_before_it(sample):
    """A page sent blurrier changes its piece's key (its tier is in it) and no page piece before
    it, and the prompt's cacheable prefix ends no later than that page."""
    mem = _grown(sample, 120, tokens=3000)
    a = mem.context()
    b = mem.context(budget=Budget(tokens=2000))  # fewer, blurrier pages
    tiers_a = {s.page.index: s.tier for s in a.pages}
    faded = min(s.page.index for s in b.pages if tiers_a.get(s.page.index) not in (None, s.tier))

    def pages(ctx):
        return {p.page.page.index: (i, p.key) for i, p in enumerate(ctx.pieces) if p.kind == "page"}

    pa, pb = pages(a), pages(b)
    assert all(pa[i][1] == pb[i][1] for i in pb if i < faded)
    assert pa[faded][1] != pb[faded][1]
    assert common_prefix(a.pieces, b.pieces) <= pb[faded][0]


def test_exporters_send_the_pieces_between_the_turns(sample):
    ctx = _grown(sample, 260).context()
    images = [p.image for p in ctx.pieces if p.image is not None]
    middle = next(m for m in ctx.to_openai() if isinstance(m["content"], list))["content"]
    assert [p for p in middle if p["type"] == "image_url"].__len__() == len(images)
    texts = [p["text"] for p in middle if p["type"] == "text"]
    assert texts[0] == ctx.pieces[[p.kind for p in ctx.pieces].index("caption")].text
    open_page = next(s for s in ctx.pages if not s.page.sealed and s.tier is Tier.TEXT)
    assert open_page.text in texts  # its per-turn pieces, joined again
