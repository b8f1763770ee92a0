"""Code and tool output laid out as a programmer reads it, from whitespace and token boundaries
alone (no parser per language):

- a line wraps between tokens, never inside an identifier, a number or a path that fits a
  column (one longer than a column is broken by character);
- its continuations are indented under it, two columns past its own indentation, and marked
  (`Line.style` "wrap": the renderer draws a hook where each starts), so structure that hangs on
  indentation survives a wrap;
- a run of one rule character (a table's `|------|`, a `//------` bar) is shortened, every run
  of the line to one length and no shorter than `MIN_RUN`, where the line would wrap: a wrapped
  run is lines of dashes, and a table too wide for its column has lost its alignment anyway;
- the Read tool's line-number gutter (Claude Code's `   225→`, and `225<TAB>`) is drawn compact:
  each number padded to the block's widest, then `:` (as `grep -n` writes it), then the line as
  it was.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

# Identifiers, numbers, dotted names and paths: runs a wrap never splits while they fit a column.
ATOM = re.compile(r"[\w$@~]+(?:(?:[./\\\-]+|://)[\w$@~]+)*")
# What a wrap never splits but is no atom: a triple quote (a call's argument drawn as its lines
# opens and closes with one: `blocks.arguments`).
TRIPLE = '"""'
_UNIT = re.compile(ATOM.pattern + "|" + TRIPLE + "|'''")
_GUTTER = re.compile(r" *(\d{1,7})(?:\u2192|\t)")
# Not the Read tool's `→`: at TINY neither Tesseract nor the reflex reader reads that thin arrow
# as anything but `-` or `=` (never once in 2,974 on Claude Code's pages), and it cost more
# characters than anything else drawn (BENCHMARKS.md, "The gutter's mark").
GUTTER_MARK = ":"
_DRAWN_GUTTER = re.compile(r" *\d{1,7}" + GUTTER_MARK)
# Runs of eight or more of one rule character: decoration no reader counts at a glance (a
# source line that is nothing else is drawn as a rule: `layout.is_rule`).
RUN = re.compile("([-=_~*#\u2500\u2501\u2550])\\1{7,}")
MIN_RUN = 3  # a Markdown table's separator needs three
HANG = 2  # columns a continuation is indented past its line's own indentation

Width = Callable[[str], float]


def indent_of(line: str, listing: bool = False) -> int:
    """Where a line's text starts: past its blanks, and, in a numbered `listing`, past its compact
    gutter's `225:` and the blanks after it (the listing's code is indented after its number).
    Only in a listing: elsewhere `    10: 'ten',` is code, indented by four."""
    m = _DRAWN_GUTTER.match(line) if listing else None
    start = m.end() if m else 0
    return start + len(line[start:]) - len(line[start:].lstrip(" "))


def hang_of(line: str, columns: int, listing: bool = False) -> int:
    """The indentation of a line's continuations, in columns: under its text and `HANG` more,
    but no more than a quarter of a column of `columns` (deep indentation in a narrow column
    would leave a continuation little room, and a page's rows go to waste)."""
    return min(indent_of(line, listing) + HANG, max(HANG, columns // 4))


def units(text: str) -> list[str]:
    """`text` as the pieces a wrap may not split: atoms, triple quotes, and every other character
    alone."""
    out: list[str] = []
    pos = 0
    for m in _UNIT.finditer(text):
        out.extend(text[pos : m.start()])
        out.append(m.group())
        pos = m.end()
    out.extend(text[pos:])
    return out


def gutter(lines: Sequence[str], tab_width: int) -> list[str] | None:
    """A numbered listing (most of its non-blank lines start with a line number and `→` or a
    tab) with its gutter compact, the rest of each line's tabs expanded as the code's own; None
    when the block is not one. Lines are raw (tabs not expanded yet)."""
    found = [_GUTTER.match(line) for line in lines]
    numbered = sum(1 for m in found if m)
    if numbered < 3 or numbered * 2 < sum(1 for line in lines if line.strip()):
        return None
    width = max(len(m.group(1)) for m in found if m)
    return [f"{m.group(1):>{width}}{GUTTER_MARK}{line[m.end():].expandtabs(tab_width)}" if m
            else line.expandtabs(tab_width) for line, m in zip(lines, found)]


def compact_indent(lines: list[str], listing: bool = False) -> list[str]:
    """A block's indentation at half its depth when every indented line is indented by a multiple
    of four (four-space or tab-indented code): the same on every line, so the structure reads
    the same, in half the width. Lines are tab-expanded; a gutter's `225:` stays in front."""
    at = [indent_of(line, listing) - gutter_width(line, listing) for line in lines]
    if not any(at) or any(n % 4 for n, line in zip(at, lines) if line.strip()):
        return lines
    return [line[: gutter_width(line, listing)] + line[gutter_width(line, listing) + n // 2 :] if n else line
            for n, line in zip(at, lines)]


def gutter_width(line: str, listing: bool) -> int:
    """The width of a line's compact gutter (`225:`) in a numbered `listing`; 0 elsewhere."""
    m = _DRAWN_GUTTER.match(line) if listing else None
    return m.end() if m else 0


def fit_runs(line: str, width: Width, max_w: float) -> str:
    """`line` as drawn: as it is where it fits `max_w` or holds no run of eight or more of one
    rule character; else with every such run cut to the longest length, at least `MIN_RUN`, at
    which the line fits (or to `MIN_RUN`, and the line wraps). What a page draws is its text: the
    transcript keeps the runs."""
    if RUN.search(line) is None or width(line) <= max_w:  # the search first: most lines hold no run
        return line

    def capped(n: int) -> str:
        return RUN.sub(lambda m: m.group()[0] * min(n, len(m.group())), line)

    lo, hi = MIN_RUN, max(len(m.group()) for m in RUN.finditer(line))
    while lo < hi:  # the longest cap that fits
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if width(capped(mid)) <= max_w else (lo, mid - 1)
    return capped(lo)


def _chars(piece: str, width: Width, first: float, rest: float) -> list[str]:
    """An atom too wide for its line, broken by character: the first piece within `first`, the
    others within `rest`."""
    out, cur, room = [], "", first
    for ch in piece:
        if cur and width(cur + ch) > room:
            out.append(cur)
            cur, room = "", rest
        cur += ch
    return [*out, cur] if cur else out


def wrap(line: str, width: Width, max_w: float, listing: bool = False) -> list[tuple[str, bool]]:
    """A code line (tabs expanded, no trailing blanks; of a numbered `listing`) as drawn lines,
    each (text, continuation): the first as far as whole tokens fit, then continuations indented
    under it."""
    if width(line) <= max_w:
        return [(line, False)]
    space = width(" ") or 1.0
    indent = indent_of(line, listing)
    hang = " " * hang_of(line, int(max_w / space), listing)
    out: list[tuple[str, bool]] = []
    cur, fresh = line[:indent], True  # fresh: nothing but the indent on the line yet
    for unit in units(line[indent:]):
        if width(cur + unit) <= max_w:
            if not (fresh and unit == " " and out):  # a continuation never starts with the blank it broke at
                cur += unit
                fresh = fresh and unit == " "
            continue
        if not fresh:
            out.append((cur.rstrip(" "), bool(out)))
            cur, fresh = hang, True
            if unit == " ":
                continue
            if width(cur + unit) <= max_w:
                cur, fresh = cur + unit, False
                continue
        # A line with only its indent so far, and a token that does not fit after it: if the
        # token fits a column (a continuation keeps room for its mark), the indent gives way.
        lead = cur[: gutter_width(cur, listing)]
        room = max_w - width(lead) - (HANG * space if out else 0)
        if width(unit) <= room:
            cur, fresh = lead + " " * int((max_w - width(lead) - width(unit)) // space) + unit, False
            continue
        pieces = _chars(unit, width, max_w - width(cur), max_w - width(hang))  # longer than a column
        for piece in pieces[:-1]:
            out.append((cur + piece, bool(out)))
            cur = hang
        cur, fresh = cur + pieces[-1], False
    if not fresh or not out:
        out.append((cur.rstrip(" "), bool(out)))
    return out
