"""Lines already drawn are not drawn again: a run of a turn's lines that repeats, in order, a
run drawn above (the same file read twice, the same test output) is drawn as one line that says
where the copy is: "= 28 lines, #12: def total(items):" (the copy's turn and its first line) for
a copy on the same page, "= 28 lines, k7m3pdxaw #12: def total(items):" for one on an earlier
page, named by its handle (where the column has room for that: `names_pages`). A run is whole
source lines: it never starts or ends between a line and its continuation.

A page is sent whole or not at all, so a copy on the same page is always in the context with its
reference. One on another page is only while that page is: where a context drops it, the lines
go again as text after the page that refers to them (`Plan.again`), and the model can also ask
`recall` for the page by its handle. A reference stands for the lines it replaces
(`Entry.covers`), so a turn continued on a later page picks up after them.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any

from . import handles
from .renderers import Layout, Line

MIN_LINES = 3  # a run shorter than this is not worth a line that points at it
MIN_CHARS = 48  # ... nor one with fewer characters than a reference line takes
_STYLES = ("code", "wrap", "text")
_START_CHARS = 8  # a run starts at a line with this many characters or more
CANDIDATES = 8  # the latest copies of a line tried as a run's start: a page of `}` is not searched whole
ANCHOR = 30  # characters of the copy's first line quoted in the reference
MIN_ANCHOR = 8  # ... and at least these, for a copy on another page (the reference names the page too)


def run_at(page: Sequence, entries: Sequence, i: int, index: dict[str, list[int]]) -> tuple[int, int]:
    """The longest run of `entries` from `i` (one turn's lines, never a header) that repeats lines
    of `page` in order: (its length, where the copy starts on the page); (0, -1) when none is
    long enough. `index`: the page's line texts -> their positions (kept by the caller)."""
    first = entries[i]
    if first.line.style not in _STYLES or first.line.style == "wrap" or not first.line.text.strip():
        return 0, -1  # a run starts where a source line does
    best, where = 0, -1
    for start in index.get(first.line.text, ())[-CANDIDATES:]:
        n = 0
        while (i + n < len(entries) and start + n < len(page) and entries[i + n].turn_id == first.turn_id
               and entries[i + n].line.style in _STYLES and page[start + n].line.text == entries[i + n].line.text):
            n += 1
        while n and i + n < len(entries) and entries[i + n].line.style == "wrap":
            n -= 1  # ... and ends where one does: never between a line and its continuation
        if n > best:
            best, where = n, start
    run = entries[i : i + best]
    if best < MIN_LINES or sum(len(e.line.text.strip()) for e in run) < MIN_CHARS:
        return 0, -1
    return best, where


def reference(n: int, copy_of: int, anchor: str, height: int, page: str | None = None) -> Line:
    """The line that stands for `n` lines repeating turn `copy_of`'s from `anchor` on (on page
    `page`, by its handle, when not on this one)."""
    quoted = anchor.strip()
    quoted = quoted if len(quoted) <= ANCHOR else quoted[: ANCHOR - 1] + "\u2026"
    where = f"#{copy_of}" if page is None else f"{page} #{copy_of}"
    return Line(f"= {n} lines, {where}: {quoted}", "ref", height)


def remember(index: dict[str, list[int]], text: str, at: int, style: str) -> None:
    """Note a page's line where a run may start (a line of some length: `}` starts none)."""
    if style in _STYLES and style != "wrap" and len(text.strip()) >= _START_CHARS:
        index.setdefault(text, []).append(at)


Count = Callable[[str], int]


class Across:
    """Every sealed page's lines in order, and where a run may start among them (`remember`),
    numbered from `base`: what a reference to another page points into. It only grows; a view
    reads the first `upto` lines."""

    def __init__(self, base: int = 0) -> None:
        self.base = base
        self.lines: list[Any] = []  # `packer.Entry`
        self.where: list[tuple[int, int]] = []  # each line's page index and place on it
        self.index: dict[str, list[int]] = {}

    def extend(self, page: Any) -> None:  # a sealed `packer.Page`
        for k, e in enumerate(page.entries):
            remember(self.index, e.line.text, self.base + len(self.lines), e.line.style)
            self.lines.append(e)
            self.where.append((page.index, k))


def names_pages(layout: Layout) -> bool:
    """Whether a reference to another page fits this layout's column: its handle, the counts,
    and the least of the copy's start worth quoting (narrow columns refer within a page only)."""
    probe = reference(99, 9_999, "x" * MIN_ANCHOR, layout.config.line_height, "x" * handles.LENGTH)
    return layout.config.repeats and layout.measure("code")(probe.text) <= layout.config.text_width


class Behind:
    """The lines a reference to another page may point at during one `fill`: the view's sealed
    ones (the first `upto` of `Across`) and those of the pages the fill has sealed so far,
    numbered as `Across` numbers them once those pages are added. A reopened packer, which has
    them all in `Across`, then draws what one that never closed draws."""

    def __init__(self, across: Across, upto: int) -> None:
        self.across, self.upto = across, upto
        self.more = Across(upto)  # the pages this fill sealed

    def __len__(self) -> int:
        return self.upto + len(self.more.lines)

    def __getitem__(self, at: int) -> Any:
        return self.across.lines[at] if at < self.upto else self.more.lines[at - self.upto]

    def get(self, text: str, default: Sequence[int] = ()) -> list[int]:
        """The latest places a run may start with this line (`run_at` reads it as its index)."""
        mine = self.more.index.get(text, [])
        older = self.across.index.get(text, default)
        k = bisect.bisect_left(older, self.upto)  # in order: those of lines this view has
        return [*older[max(0, k - CANDIDATES + len(mine)):k], *mine]

    def where(self, at: int) -> tuple[int, int]:
        """The line's page index and place on it."""
        return self.across.where[at] if at < self.upto else self.more.where[at - self.upto]

    def extend(self, page: Any) -> None:  # a sealed `packer.Page`
        self.more.extend(page)
