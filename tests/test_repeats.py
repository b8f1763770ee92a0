"""Lines a page already shows are not drawn on it again (`optictx/repeats.py`): a run that repeats
the same page's lines is one line naming the copy; a copy on another page is drawn in full; a
memory reopened from its stored pages packs the rest as one that never closed."""

from __future__ import annotations

from functools import partial

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from optictx import Turn, handles
from optictx.packer import Packer
from optictx.renderers import Layout, RenderConfig
from optictx.tokens import get_tokenizer

FILE = "\n".join(f"    value_{i} = compute_{i}(alpha, beta)  # step {i}" for i in range(12))


def _packer(tpp: int = 4000) -> Packer:
    return Packer(Layout(RenderConfig(columns=2)), get_tokenizer(), tpp)  # 50-character columns


def _tool(i: int, text: str) -> Turn:
    return Turn(role="tool", tool_call_id=f"c{i}", content=text, id=i)


def test_a_run_the_page_already_shows_is_one_line_that_names_its_copy():
    p = _packer()
    for t in (_tool(0, FILE), _tool(1, "ok\n" + FILE + "\ndone")):
        p.add(t)
    [page] = p.preview()
    second = [e for e in page.entries if e.turn_id == 1]
    refs = [e for e in second if e.line.style == "ref"]
    drawn = len(p.entries(_tool(0, FILE))) - 1  # FILE's drawn lines, continuations too (less the header)
    assert len(refs) == 1 and refs[0].covers == drawn > 12
    assert refs[0].line.text.startswith("= 12 lines, #0: value_0 = compute_0")  # twelve source lines
    assert [e.line.text for e in second[1:]] == ["ok", refs[0].line.text, "done"]
    assert sum(e.covers for e in second) == len(p.entries(_tool(1, "ok\n" + FILE + "\ndone")))
    assert FILE.splitlines()[5].strip() not in "\n".join(e.line.text for e in second)


def test_a_reference_points_only_at_lines_above_it_on_its_own_page():
    p = _packer(tpp=300)  # pages of about two copies: some on the same page, the rest on another
    for i in range(6):
        p.add(_tool(i, FILE))
    pages = [*p.sealed, *p.preview()]
    assert any(e.line.style == "ref" for page in pages for e in page.entries), "some copy is on its own page"
    for page in pages:
        for k, e in enumerate(page.entries):
            if e.line.style == "ref":
                n = e.covers
                anchor = e.line.text.split(": ", 1)[1].rstrip("\u2026")
                above = [x.line.text for x in page.entries[:k]]
                assert any(t.strip().startswith(anchor) for t in above)  # the copy is on this page, above
                assert n <= k
    drawn_again = sum(1 for page in pages for e in page.entries if e.line.text.strip().startswith("value_5 ="))
    assert drawn_again >= 2  # copies on other pages: drawn in full again


def test_a_run_never_starts_or_ends_inside_a_wrapped_line():
    long = "    result = " + " + ".join(f"term_{i}" for i in range(30))  # wraps over several lines
    text = "\n".join([long, "next_line = 1", "other_line = 2", "last_line = 3"])
    p = _packer()
    for t in (_tool(0, text), _tool(1, "x = 0\n" + "\n".join(text.splitlines()[1:]) + "\n" + long)):
        p.add(t)
    [page] = p.preview()
    styles = [e.line.style for e in page.entries if e.turn_id == 1]
    assert "ref" in styles
    for before, after in zip(styles, styles[1:]):
        assert not (after == "wrap" and before == "ref")  # a continuation follows its own line, never a reference


_LINES = st.lists(st.one_of(st.sampled_from([f"line {k}: payload {k * 7} end" for k in range(8)]),  # repeats
                            st.integers(0, 10**6).map(lambda k: f"once {k}: drawn in full")), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turns=st.lists(_LINES, min_size=2, max_size=14), cut=st.integers(1, 13), tpp=st.sampled_from([120, 400, 4000]),
       handled=st.booleans())
@example(turns=[["line 0: payload 0 end"], [f"once {k}: drawn in full" for k in range(20)]], cut=2, tpp=120,
         handled=True)  # a turn's lines fill a page under its handle: the reopen counts them back to its start
def test_a_reopened_packer_packs_the_rest_as_one_that_never_closed(turns, cut, tpp, handled):
    tok, layout = get_tokenizer(), Layout(RenderConfig())
    made = [_tool(i, "\n".join(lines)) for i, lines in enumerate(turns)]
    handle = partial(handles.handle, "00" * 16) if handled else None  # a turn filling a page under its handle
    whole = Packer(layout, tok, tpp, handle=handle)
    for t in made:
        whole.add(t)
    first = Packer(layout, tok, tpp, handle=handle)
    for t in made[: min(cut, len(made))]:
        first.add(t)
    _, blobs = first.unsaved()
    again = Packer(layout, tok, tpp, handle=handle)
    assert again.restore(list(blobs))
    for t in made:  # a reopen replays every turn; those on the restored pages are skipped
        again.add(t)
    assert [pg.digest for pg in again.sealed] == [pg.digest for pg in whole.sealed]
    assert [e.line.text for e in again.view().open_entries] == [e.line.text for e in whole.view().open_entries]
    # every line of every turn is on a page, drawn or referred to
    assert sum(e.covers for pg in whole.sealed for e in pg.entries) + sum(
        e.covers for e in whole.view().open_entries) == sum(len(whole.entries(t)) for t in made)


def test_a_copy_on_another_page_is_one_line_that_names_that_page_and_where_the_copy_is():
    p = Packer(Layout(RenderConfig(columns=2)), get_tokenizer(), 300, handle=partial(handles.handle, "00" * 16))
    for i in range(6):
        p.add(_tool(i, FILE))
    pages = [*p.sealed, *p.preview()]
    drawn = [e.line.text for e in p.entries(_tool(0, FILE))[1:]]  # FILE as a page draws it, less the header
    cross = [(page, e) for page in pages for e in page.entries if e.source is not None]
    assert cross, "a copy on an earlier page is referred to, not drawn again"
    for page, e in cross:
        at_page, at = e.source
        target = pages[at_page]
        assert at_page < page.index and target.sealed
        copied = [x.line.text for x in target.entries[at : at + e.covers]]
        assert any(drawn[k : k + len(copied)] == copied for k in range(len(drawn))) and len(copied) >= 3
        source_lines = sum(1 for x in target.entries[at : at + e.covers] if x.line.style != "wrap")
        assert e.line.text.startswith(f"= {source_lines} lines, {target.handle} #{target.entries[at].turn_id}: ")
        assert copied[0].strip().startswith(e.line.text.split(": ", 1)[1].rstrip("\u2026"))


def test_a_reference_to_a_page_not_sent_is_written_again_after_its_page():
    """A page refers to lines of another only while that page is in the context: where the
    budget drops the page that holds the copy, the lines go as text right after the page that
    refers to them (and the budget holds with them)."""
    from optictx import Budget, Memory
    from optictx.pieces import PageSegment

    def lines(k, n):
        return [f"    field_{k}_{i} = load_{k}(source, {i})  # step {i} of {k}" for i in range(n)]

    mem = Memory(keep_recent=2, budget=100_000, vision="anthropic")  # columns wide enough for a page's handle
    for k in range(60):  # each file shows six lines of one read long before it
        old = lines(k - 30, 40)[10:16] if k >= 30 else []
        mem.add({"role": "user", "content": "\n".join([*lines(k, 20), *old, *lines(k + 100, 20)])})
        mem.add({"role": "assistant", "content": f"Read file {k}."})
    seen = 0
    for budget in range(24000, 1000, -1000):
        ctx = mem.context(budget=Budget(tokens=budget), commit=False)
        assert ctx.tokens <= budget
        sent = {s.page.index for s in ctx.pages}
        for i, seg in enumerate(ctx.segments):
            if not isinstance(seg, PageSegment):
                continue
            missing = [e for e in seg.page.entries if e.source is not None and e.source[0] not in sent]
            after = []
            for later in ctx.segments[i + 1:]:
                if isinstance(later, PageSegment):
                    break
                after.append(later)
            copies = [s.text for s in after if s.kind == "copies"]
            if not missing:
                assert not copies
                continue
            seen += 1
            [text] = copies
            pages = {p.index: p for p in mem.pages}
            for e in missing:
                at_page, at = e.source
                lines = [x.line.text for x in pages[at_page].entries[at : at + e.covers]]
                assert e.line.text + " (page " in text and "\n".join(lines) in text
                named = e.line.text.split(", ", 1)[1].split(" ", 1)[0]  # the handle the reference names
                assert named == pages[at_page].handle and lines[0].strip() in mem.recall(named).text
    assert seen, "some budget dropped a page another sent page refers to"


def test_only_a_column_wide_enough_to_name_a_page_refers_to_another_and_the_caption_says_which():
    from optictx import Memory

    text = "\n".join(f"    field_{i} = load(source, {i})  # step {i}" for i in range(60))
    for vision, wide in (("deepseek-ocr", False), ("anthropic", True)):  # 22- and 39-character columns
        mem = Memory(keep_recent=1, budget=200_000, vision=vision, verbatim=False)
        for k in range(40):
            mem.add({"role": "user", "content": text if k % 8 == 0 else f"{text}\nfile {k}".replace("field", f"f{k}")})
        assert any(e.source for p in mem.pages for e in p.entries) is wide
        assert ("on page <handle>" in mem.context().segments[0].text) is wide


def test_a_conversation_that_repeats_itself_keeps_its_newest_pages_when_not_all_fit():
    """In a conversation that repeats itself (the NIAH haystack: the same kinds of tool output
    again and again), most pages refer to older ones. Where the budget cannot hold every page,
    dropping the oldest makes the pages after them need those lines written again, which takes
    more room, which dropped more pages, until once none was left. Now the newest pages that fit
    with the lines they need written again are sent, within the budget, each run of lines once."""
    from optictx import Budget, Memory
    from optictx.eval.niah import haystack
    from optictx.pieces import PageSegment

    # A fixed handle key: handles are part of what a page draws, and so of where pages break.
    mem = Memory(vision="openai:gpt-4o", budget=Budget(tokens=32_000), keep_recent=4, verbatim=False,
                 key="00" * 16)
    for t in haystack("builtin", 160_000, 0):
        mem.add(t)
    ctx = mem.context()
    shown = [s.page.index for s in ctx.pages]
    assert ctx.gone and shown and ctx.tokens <= 32_000
    sealed = [p.index for p in mem.pages if p.sealed]
    assert shown == sealed[-len(shown):]  # the newest sealed pages, in order
    # Most of them: 49 of 73 here (12 when every reference wrote its lines again, 0 before that).
    assert 2 * len(shown) > len(sealed)
    # Every reference a sent page makes to a page not sent has its lines written again, after it
    # or after an earlier sent page (once: the same lines are referred to from dozens of pages).
    pages, missing, written, due = {p.index: p for p in mem.pages}, 0, "", []
    for seg in [*ctx.segments, None]:
        if seg is not None and not isinstance(seg, PageSegment):
            written += seg.text if seg.kind == "copies" else ""
            continue
        for at_page, at, covers in due:  # the page before this one: its copies are in by now
            assert "\n".join(x.line.text for x in pages[at_page].entries[at : at + covers]) in written
        missing += len(due)
        due = [(*e.source, e.covers) for e in seg.page.entries if e.source is not None
               and e.source[0] not in shown] if seg is not None else []
    assert missing > len(ctx.pages), "pages sent refer to pages not sent, many times over"
