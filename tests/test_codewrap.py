"""Code laid out as a programmer reads it (`renderers/codewrap.py`): lines wrap between tokens,
continuations are indented under their line and marked, gutters and indentation drawn compact;
and the measure of what a layout keeps of a program's shape (`eval/structure.py`)."""

from __future__ import annotations

import json
import re

from conftest import needs_tesseract
from hypothesis import example, given, settings
from hypothesis import strategies as st

from optictx.blocks import arguments, turn_blocks
from optictx.eval.structure import block_structure, structure
from optictx.renderers import Block, Layout, RenderConfig, draw_page
from optictx.renderers.codewrap import HANG, MIN_RUN, compact_indent, fit_runs, gutter, wrap
from optictx.renderers.draw import MARK_GREY
from optictx.turns import Turn

WORD = st.from_regex(r"[a-z_][a-z0-9_]{0,11}|[0-9]{1,6}|[a-z]{1,5}(/[a-z]{1,5}){1,2}\.py", fullmatch=True)
PUNCT = st.sampled_from(["(", ")", ", ", " = ", ".", "[", "]", ": ", " + ", '"', "{", "}", " "])
LINE = st.builds(lambda n, parts: " " * n + "".join(parts).rstrip(" "),
                 st.integers(0, 12), st.lists(st.one_of(WORD, PUNCT), min_size=1, max_size=30))
CHAR = len  # a monospace measure in columns


@settings(max_examples=300, deadline=None)
@given(line=LINE, width=st.integers(16, 60))
def test_a_wrapped_line_keeps_its_tokens_whole_and_its_continuations_under_it(line, width):
    drawn = wrap(line, CHAR, width)
    assert all(len(text) <= width for text, _ in drawn)
    assert [more for _, more in drawn] == [False] + [True] * (len(drawn) - 1)
    # Nothing but blanks is lost or added, in order.
    assert "".join(line.split()) == "".join("".join(t.split()) for t, _ in drawn)
    # Identifiers, numbers and paths no wider than a column less the hang are never split.
    for atom in re.findall(r"[\w$@~]+(?:(?:[./\\\-]+|://)[\w$@~]+)*", line):
        if len(atom) <= width - HANG:
            assert any(atom in text for text, _ in drawn), (atom, drawn)
    indent = len(line) - len(line.lstrip(" "))
    if indent + HANG <= width // 2 and all(len(a) <= width // 2 - HANG for a in re.findall(r"\S+", line)):
        # Under its line, HANG further in, but never deeper than a quarter of the column.
        assert all(t.startswith(" " * min(indent + HANG, max(HANG, width // 4))) for t, more in drawn if more)


def test_a_numbered_listing_draws_its_gutter_compact():
    read = ["     1\tdef add(a, b):", "     2\t\treturn a + b", "     3\t", "    10\tprint(add(1, 2))"]
    assert gutter(read, 4) == [" 1:def add(a, b):", " 2:    return a + b", " 3:", "10:print(add(1, 2))"]
    arrows = ["   225\u2192x = 1", "   226\u2192    y = 2", "   227\u2192z"]
    assert gutter(arrows, 4) == ["225:x = 1", "226:    y = 2", "227:z"]
    assert gutter(["a\tb", "1\tc", "plain text"], 4) is None  # not a listing: as it was


@needs_tesseract
def test_a_listing_s_line_numbers_are_read_back_with_their_mark_at_tiny():
    """A numbered listing's gutter is read back by both readers as a number and its mark on a
    TINY page (the Read tool's own thin `→` was read as `-` or `=`: never once on Claude Code's
    pages)."""
    from optictx import Memory, Tier
    from optictx.models import ReflexReader
    from optictx.readers import TesseractReader

    listing = "\n".join(f"{n:>6}\u2192    value_{n} = compute(item_{n}, limit={n * 7})" for n in range(101, 141))
    mem = Memory(keep_recent=0)
    mem.add({"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "Read", "arguments": '{"file_path": "m.py"}'}}]})
    mem.add({"role": "tool", "tool_call_id": "call_1", "content": listing})
    page = mem.pages[0]
    drawn = [line.text for line in page.lines if re.match(r"1[0-4]\d\S", line.text)]
    assert len(drawn) == 40
    image, boxes = mem.images.at(page, Tier.TINY), mem.images.boxes(page, Tier.TINY)
    for reader in (TesseractReader(line_boxes=True), ReflexReader()):
        read = reader.read(image, boxes).split("\n")
        marked = sum(1 for got in read if re.match(r"\d{3}:", got.replace(" ", "")))
        assert marked >= 36, (type(reader).__name__, marked, read[:12])


RUN_LINE = st.builds(lambda parts: "".join(parts), st.lists(st.one_of(
    WORD, PUNCT, st.sampled_from(["|", "//", "+", " "]),
    st.builds(lambda ch, n: ch * n, st.sampled_from("-=*#_~"), st.integers(1, 300))), min_size=1, max_size=12))


def _runs(text: str) -> list[tuple[str, int]]:
    """Each run of one character: that character and how long the run is."""
    return [(m.group()[0], len(m.group())) for m in re.finditer(r"(.)\1*", text, re.S)]


@settings(max_examples=300, deadline=None)
@given(line=RUN_LINE, width=st.integers(16, 60))
def test_a_line_too_wide_for_its_column_draws_its_rules_shorter_and_nothing_else(line, width):
    """The oracle is the line: the same runs of the same characters in the same order, each no
    longer than it was, shortened only where eight or more of one rule character ran and the line
    did not fit, all to one length and at least MIN_RUN; as it was where it fit."""
    shown = fit_runs(line, CHAR, width)
    if len(line) <= width:
        assert shown == line
        return
    before, after = _runs(line), _runs(shown)
    assert [ch for ch, _ in before] == [ch for ch, _ in after]
    cut = set()
    for (ch, n), (_, m) in zip(before, after):
        assert m == n or (n >= 8 and ch in "-=*#_~" and MIN_RUN <= m < n), (ch, n, m)
        if m < n:
            cut.add(m)
    assert len(cut) <= 1  # every run cut is cut to one length
    assert bool(cut) == bool(re.search(r"([-=*#_~])\1{7,}", line))  # too wide: its runs give way
    if cut:  # as long as fits: one more would not fit
        assert len(shown) <= width or cut == {MIN_RUN}
        n = cut.pop()
        wider = re.sub(r"([-=*#_~])\1{7,}", lambda m: m.group()[0] * min(n + 1, len(m.group())), line)
        assert len(wider) > width or n == MIN_RUN


def test_a_table_too_wide_for_its_column_keeps_its_cells_and_a_bar_does_not_wrap():
    layout = Layout(RenderConfig(columns=4))
    table = "| name | kind |\n|" + "-" * 300 + "|" + "-" * 40 + "|\n  //" + "-" * 120
    lines = layout.lines(Block(table, "code"))
    assert [ln.style for ln in lines] == ["code"] * 3  # a wrapped run was 300 dashes in eight lines
    assert lines[1].text.count("|") == 3 and lines[2].text.startswith("  //---")
    cells = lines[1].text.strip("|").split("|")
    assert len(set(cells)) == 1 and MIN_RUN <= len(cells[0]) < 40  # both cut to one length
    prose = layout.lines(Block("| a | b |\n|" + "-" * 300 + "|---|", "text"))
    assert len(prose) == 2 and prose[1].text.count("|") == 3
    old = Layout(RenderConfig(columns=4, code_layout="chars")).lines(Block(table, "code"))
    assert "".join(ln.text for ln in old).count("-") == 460  # the old pages draw every one


def test_four_space_indentation_is_halved_on_every_line_and_two_space_left_alone():
    assert compact_indent(["def f():", "    if x:", "        return 1", "    return 2"]) == [
        "def f():", "  if x:", "    return 1", "  return 2"]
    assert compact_indent(["1:def f():", "2:    return 1"], listing=True) == ["1:def f():", "2:  return 1"]
    keys = ["{", "    10: 'ten',", "    20: 'twenty',", "}"]  # not a listing: the numbers are code
    assert compact_indent(keys) == ["{", "  10: 'ten',", "  20: 'twenty',", "}"]
    two = ["a:", "  b: 1", "  c:", "    d: 2"]
    assert compact_indent(two) == two


def test_a_continuation_is_marked_on_the_page():
    layout = Layout(RenderConfig(columns=4))
    code = "    result = compute(alpha_value, beta_value, gamma_value, delta_value)"
    lines = layout.lines(Block(code, "code"))
    assert [ln.style for ln in lines] == ["code"] + ["wrap"] * (len(lines) - 1) and len(lines) > 1
    img, boxes = draw_page(lines, layout)
    x0, y0, _, _ = boxes[1].box
    gutter = img.crop((x0 - layout.config.gutter // 2, y0, x0, y0 + layout.config.line_height))
    assert gutter.getextrema()[0] == MARK_GREY  # a light bar beside the continuation, outside its box
    first = img.crop((boxes[0].box[0] - layout.config.gutter // 2, boxes[0].box[1], boxes[0].box[0],
                      boxes[0].box[1] + layout.config.line_height // 3))
    assert first.getextrema()[0] == 255  # none beside the line that is not a continuation


PROGRAM = '''def export_total(items: list[dict], *, limit: int = 39) -> Decimal:
    """Export the total of the given items."""
    total = Decimal("0")
    for i, item in enumerate(items):
        if i >= limit:
            break
        amount = Decimal(str(item.get("total", 0)))
        total += (amount * Decimal("0.69")).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    return total'''


def test_the_measure_sees_identifiers_cut_and_indentation_lost_where_characters_are_kept():
    """The oracle is the program's own text: which identifiers it holds, which lines are indented.
    Cut at a column's last character, every character is drawn but identifiers are split and
    continuations start at the left edge; laid out as a program, neither."""
    narrow = {"columns": 4, "compact_indent": False}
    chars = block_structure(Block(PROGRAM, "code"), Layout(RenderConfig(code_layout="chars", **narrow))).report()
    program = block_structure(Block(PROGRAM, "code"), Layout(RenderConfig(**narrow))).report()
    identifiers = len(re.findall(r"[\w.]+", PROGRAM.replace('"', " ")))
    assert chars["atoms"] == program["atoms"] and chars["atoms"] >= identifiers // 2
    assert chars["atoms_unbroken"] < 95 and chars["indent_kept"] < 60  # the program is gone
    assert program["atoms_unbroken"] == 100 and program["indent_kept"] == 100
    assert chars["indented_lines"] == program["indented_lines"] == 8  # every line of the body


def test_the_measure_follows_a_block_past_a_rule_drawn_shorter():
    """A wide separator above the program is drawn shorter (`fit_runs`): the program below it is
    drawn as before, and the measure still says so (it pairs source and drawn lines by their
    characters, so it must pair them with the line as drawn)."""
    layout = Layout(RenderConfig(columns=4, compact_indent=False))
    report = block_structure(Block("|" + "-" * 200 + "|\n" + PROGRAM, "code"), layout).report()
    assert report["atoms_unbroken"] == 100 and report["indent_kept"] == 100 and report["indented_lines"] == 8


def _edit(old: str, new: str, **more) -> Turn:
    args = {"file_path": "/app/export.py", "old_string": old, "new_string": new, **more}
    return Turn(role="assistant", content=None, id=5,
                tool_calls=[{"id": "toolu_01", "function": {"name": "Edit", "arguments": json.dumps(args)}}])


def test_an_edit_s_code_is_drawn_as_its_lines_and_keeps_its_indentation():
    """Escaped in JSON, the code an edit takes out and puts in is one run of `\\n`s: no line and
    no indentation is left of it. Drawn as a program, each of its lines is a line of the call,
    between triple quotes (three single quotes where the code holds a docstring), and the
    measure sees every indented line kept; the oracle is the call's own JSON."""
    new = PROGRAM.replace("0.69", "0.7")
    turn = _edit(PROGRAM, new, replace_all=False)
    call = turn_blocks(turn)[-1].text
    assert call.startswith('call [toolu_01] Edit({"file_path": "/app/export.py",\n')
    assert f"'''\n{PROGRAM}'''" in call and f"'''\n{new}'''" in call and call.endswith(',\n"replace_all": false})')
    layout = Layout(RenderConfig(columns=4, compact_indent=False))
    drawn = structure([turn], layout).report()
    program_lines = sum(1 for line in PROGRAM.split("\n") if line.strip())
    assert drawn["call_lines"] == 2 * program_lines and drawn["call_lines_drawn"] == 100
    assert drawn["indented_lines"] >= 2 * 8 and drawn["indent_kept"] == 100
    as_sent = structure([turn], Layout(RenderConfig(columns=4, compact_indent=False, code_layout="chars"))).report()
    assert as_sent["call_lines_drawn"] == 0 and as_sent["indented_lines"] == 0  # the program is gone
    assert '"old_string": "def export_total(' in turn_blocks(turn, program=False)[-1].text


@given(values=st.lists(st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40), max_size=4))
@example(values=["\r\n\x7f"])  # found by a fresh draw: the old oracle took an escaped \x7f for a loss
@example(values=["a\nb", "\x7f\u2028"])
@settings(max_examples=200, deadline=None)
def test_a_call_s_arguments_lose_nothing_on_the_page(values):
    """Whatever the strings: each drawn between triple quotes exactly as it is (never a quote
    that it holds or ends with), or as JSON; the arguments as sent where nothing holds a line
    break or they are not a JSON object."""
    args = {f"k{i}": v for i, v in enumerate(values)}
    text = json.dumps(args)
    drawn = arguments(text)
    lined = [v for v in values if "\n" in v and "\r" not in v
             and any(q not in v and not v.endswith(q[0]) for q in ('"""', "'''"))]
    if not lined:  # no string is drawn as its lines: the arguments go as sent, escapes and all
        assert drawn == text
        return
    for v in args.values():
        quoted = [q for q in ('"""', "'''") if f"{q}\n{v}{q}" in drawn]
        assert quoted or json.dumps(v, ensure_ascii=False) in drawn
        assert all(q not in v and not v.endswith(q[0]) for q in quoted)  # the quote ends it, not its text
        quotable = any(q not in v and not v.endswith(q[0]) for q in ('"""', "'''"))
        if "\n" in v and "\r" not in v and quotable:
            assert json.dumps(v, ensure_ascii=False) not in drawn  # drawn as its lines
    assert arguments('["a\\nb"]') == '["a\\nb"]' and arguments('{"a": "x\\n') == '{"a": "x\\n'
