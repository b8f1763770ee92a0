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
