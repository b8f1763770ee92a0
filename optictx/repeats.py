"""Lines a page already shows are not drawn on it again: a run of a turn's lines that repeats,
in order, a run the same page drew above (the same file read twice, the same test output) is
drawn as one line that says where the copy is ("= 28 lines, #12: def total(items):", the copy's
turn and its first line). A run is whole source lines: it never starts or ends between a line and
its continuation.

Only the page's own lines are referred to: a page is sent whole or not at all, so the copy is
always in the context wherever the reference is. A reference stands for the lines it replaces
(`Entry.covers`), so a turn continued on a later page picks up after them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .renderers import Line

MIN_LINES = 3  # a run shorter than this is not worth a line that points at it
MIN_CHARS = 48  # ... nor one with fewer characters than a reference line takes
_STYLES = ("code", "wrap", "text")
_START_CHARS = 8  # a run starts at a line with this many characters or more
_CANDIDATES = 8  # the latest copies of a line tried as a run's start: a page of `}` is not searched whole
ANCHOR = 30  # characters of the copy's first line quoted in the reference


def run_at(page: Sequence, entries: Sequence, i: int, index: dict[str, list[int]]) -> tuple[int, int]:
    """The longest run of `entries` from `i` (one turn's lines, never a header) that repeats lines
    of `page` in order: (its length, where the copy starts on the page); (0, -1) when none is
    long enough. `index`: the page's line texts -> their positions (kept by the caller)."""
    first = entries[i]
    if first.line.style not in _STYLES or first.line.style == "wrap" or not first.line.text.strip():
        return 0, -1  # a run starts where a source line does
    best, where = 0, -1
    for start in index.get(first.line.text, ())[-_CANDIDATES:]:
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


def reference(n: int, copy_of: int, anchor: str, height: int) -> Line:
    """The line that stands for `n` lines repeating turn `copy_of`'s from `anchor` on."""
    quoted = anchor.strip()
    quoted = quoted if len(quoted) <= ANCHOR else quoted[: ANCHOR - 1] + "\u2026"
    return Line(f"= {n} lines, #{copy_of}: {quoted}", "ref", height)


def remember(index: dict[str, list[int]], text: str, at: int, style: str) -> None:
    """Note a page's line where a run may start (a line of some length: `}` starts none)."""
    if style in _STYLES and style != "wrap" and len(text.strip()) >= _START_CHARS:
        index.setdefault(text, []).append(at)


Count = Callable[[str], int]
