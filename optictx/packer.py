"""Packer: turns that leave the text window go, in order, onto pages of a fixed text density.

A page is sealed when its tokens or its height are used up, and never changes after that, so its
pixels (and the visual tokens and prefix KV built from them) stay valid for the memory's life.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from . import handles, repeats
from .blocks import turn_blocks
from .errors import ConfigError
from .lru import LRU
from .renderers import Columns, Layout, Line
from .tokens import Tokenizer
from .turns import Turn

MIN_TOKENS_PER_PAGE, MAX_TOKENS_PER_PAGE = 16, 65_536  # a page holds ~1,000 at the default size

STYLES = ("header", "text", "code", "wrap", "ref", "handle", "rule")  # what a stored page's lines may be

# Part of every stored page set's key: bump it when a change moves page breaks, so pages stored
# by an older optictx are re-packed instead of mixed with new ones.
PACK_VERSION = 5

@dataclass(frozen=True, slots=True)
class Entry:
    """One laid-out line and the turn it came from; `covers`: the turn's lines it stands for (a
    reference to lines already drawn stands for them all, `repeats.py`); `source`: for a
    reference to another page, where the copy starts (that page's index, the line on it)."""

    turn_id: int
    line: Line
    tokens: int
    covers: int = 1
    source: tuple[int, int] | None = None


@dataclass(frozen=True, eq=False)
class Page:
    """A page's content: its lines, the turns on it, and whether it is sealed (final).

    `tokens` is the text tokens of a sealed page, counted once when it seals (what the scheduler
    weighs its images against); None on pages not sealed yet, which change with every turn."""

    index: int
    entries: tuple[Entry, ...]
    sealed: bool
    style_digest: str = field(repr=False)
    tokens: int | None = None

    @property
    def lines(self) -> tuple[Line, ...]:
        return tuple(e.line for e in self.entries)

    @cached_property
    def text(self) -> str:
        """Exactly the text drawn on the page, one line per row."""
        return "\n".join(e.line.text for e in self.entries)

    @cached_property
    def turn_ids(self) -> tuple[int, ...]:
        """The turns whose lines the page shows (its handle line shows none)."""
        return tuple(dict.fromkeys(e.turn_id for e in self.entries if e.covers))

    @cached_property
    def bounds(self) -> tuple[int, int] | None:
        """Its first and last turn (None: it shows none), found once: a sealed page is asked on
        every request (`recall.spans_of`)."""
        ids = self.turn_ids
        return (min(ids), max(ids)) if ids else None

    @cached_property
    def refers(self) -> tuple[Entry, ...]:
        """Its references to another page's lines (`Entry.source`)."""
        return tuple(e for e in self.entries if e.source is not None)

    @property
    def handle(self) -> str | None:
        """The page's handle (`handles.py`), drawn on its first line; None on a page without one."""
        first = self.entries[0].line if self.entries else None
        return first.text if first is not None and first.style == "handle" else None

    @cached_property
    def digest(self) -> str:
        """Identifies the pixels: render settings, fonts and every line with its style."""
        h = hashlib.sha256(self.style_digest.encode())
        for e in self.entries:
            h.update(f"\x00{e.line.style}\x00{e.line.height}\x00".encode())
            h.update(e.line.text.encode("utf-8", "surrogatepass"))
        return h.hexdigest()[:24]

    @property
    def tokens_estimate(self) -> int:
        return sum(e.tokens for e in self.entries)

    def to_blob(self) -> str:
        """The sealed page as the store keeps it (JSON text; `Packer.restore` reads it back)."""
        rows = [[e.turn_id, e.line.style, e.line.height, e.tokens, e.line.text,
                 *([e.covers, *e.source] if e.source else [e.covers] if e.covers != 1 else [])]
                for e in self.entries]
        return json.dumps({"tokens": self.tokens, "lines": rows}, ensure_ascii=True)


def _stored_right(e: Entry) -> bool:
    """A stored line of a known style, standing for turn lines as its style does (a handle for none)."""
    return e.line.style in STYLES and (e.covers == 0 if e.line.style == "handle" else e.covers >= 1) and (
        e.source is None or (e.line.style == "ref" and min(e.source) >= 0))


def _page_from_blob(blob: str, index: int, style: str) -> Page:
    body = json.loads(blob)
    entries = tuple(Entry(int(tid), Line(str(text), style_, int(height)), int(n), int(more[0]) if more else 1,
                          (int(more[1]), int(more[2])) if len(more) > 1 else None)
                    for tid, style_, height, n, text, *more in body["lines"])
    if not entries or not all(_stored_right(e) for e in entries):
        raise ConfigError(f"stored page {index} is malformed")
    return Page(index, entries, True, style, int(body["tokens"]))


class _Lines:
    """A turn's laid-out lines, by turn id (recent turns are laid out again for every preview).
    `in_place`: the ids of turns that stay text in place (a page draws their header only)."""

    def __init__(self, layout: Layout, tokenizer: Tokenizer, in_place: Container[int] = frozenset()) -> None:
        self.layout, self.tokenizer, self.in_place = layout, tokenizer, in_place
        self._cache: LRU[int, tuple[Entry, ...]] = LRU(max_items=512)

    def __call__(self, turn: Turn) -> tuple[Entry, ...]:
        key = turn.id if turn.id is not None else -1
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        blocks = turn_blocks(turn, key in self.in_place, self.layout.config.program)
        out = tuple(Entry(key, ln, n) for b in blocks for ln, n in self._counted(self.layout.lines(b)))
        if key >= 0:
            self._cache[key] = out
        return out

    def forget(self, turn: Turn) -> None:
        self._cache.pop(turn.id if turn.id is not None else -1)

    def _counted(self, lines: list[Line]) -> list[tuple[Line, int]]:
        """Each line with its share of the block's tokens, by characters.

        One tokenizer call per block instead of per line (several times faster); the shares
        only steer where pages break. The scheduler prices a sealed page by counting its text.
        """
        total = self.tokenizer.count("\n".join(ln.text for ln in lines))
        chars = sum(len(ln.text) for ln in lines) or 1
        out, seen, given = [], 0, 0
        for ln in lines:
            seen += len(ln.text)
            share = round(total * seen / chars) - given
            given += share
            out.append((ln, share))
        return out


@dataclass(frozen=True, eq=False)
class PackView:
    """The packer at one moment: its sealed pages and open page, frozen. What planning reads:
    `preview` lays turns out after it without changing it (or the packer)."""

    sealed: tuple[Page, ...]
    open_entries: tuple[Entry, ...]
    cols: Columns = field(repr=False)
    tokens_per_page: int
    style: str = field(repr=False)
    layout: Layout = field(repr=False)
    entries: _Lines = field(repr=False)  # a turn's lines (a shared, thread-safe cache)
    handle_of: Callable[[int], str] | None = field(default=None, repr=False)  # page index -> its handle
    across: repeats.Across | None = field(default=None, repr=False)  # None: no reference to another page
    upto: int = 0  # the lines of `across` this view may refer to

    def preview(self, turns: Iterable[Turn] = ()) -> list[Page]:
        """Pages after the sealed ones if `turns` were packed too (the open page included)."""
        full, rest, _ = self.fill([e for t in turns for e in self.entries(t)])
        # Pages that a preview fills are not sealed: the real add may pack them differently.
        pages = [Page(p.index, p.entries, False, self.style) for p in full]
        if rest:
            pages.append(Page(len(self.sealed) + len(pages), tuple(rest), False, self.style))
        return pages

    def drawn(self, turn: Turn) -> str:
        """The turn's lines as a page draws them."""
        return "\n".join(e.line.text for e in self.entries(turn))

    def fill(self, entries: Sequence[Entry]) -> tuple[list[Page], list[Entry], Columns]:
        """`entries` packed after the open page: the pages they fill, the new open page, its cursor."""
        cfg, cap_t = self.layout.config, self.tokens_per_page
        pages: list[Page] = []

        def keep(e: Entry) -> int:  # no orphan headers: a header needs a body line below it
            return cfg.line_height if e.line.style == "header" else 0

        first_index = len(self.sealed)
        cur, cols = list(self.open_entries), self.cols.copy()  # the open page's cursor, not a replay of it
        used_t = sum(e.tokens for e in cur)
        index: dict[str, list[int]] = {}  # the page's line texts -> where (repeats.py)
        behind = repeats.Behind(self.across, self.upto) if self.across is not None else None
        for at, e in enumerate(cur):
            repeats.remember(index, e.line.text, at, e.line.style)
        i = 0
        while i < len(entries):
            if not cur and self.handle_of is not None:  # a page opens with its handle
                cur.append(self._opening(first_index + len(pages), entries[i].turn_id, cols))
                used_t += cur[-1].tokens
            e = entries[i]
            n, copy = repeats.run_at(cur, entries, i, index) if cfg.repeats else (0, -1)
            if n:
                e = self._reference(entries[i : i + n], cur[copy])
            elif behind is not None:
                n, copy = repeats.run_at(behind, entries, i, behind)  # type: ignore[arg-type]
                where = behind.where(copy) if n else (0, 0)
                ref = self._reference(entries[i : i + n], behind[copy], self.handle_of(where[0])) if n else None
                if ref is None:
                    n = 0
                else:
                    e, n = replace(ref, source=where), -n  # on another page: stays valid when this one seals
            fits = used_t + e.tokens <= cap_t and cols.place(e.line.height, keep(e)) is not None
            if not fits:
                if any(x.covers for x in cur):  # a page with only its handle takes the line, whatever it is
                    pages.append(Page(first_index + len(pages), tuple(cur), True, self.style))
                    if behind is not None:
                        behind.extend(pages[-1])
                    cur, used_t, index, cols = [], 0, {}, Columns(cfg)
                    if self.handle_of is not None:
                        cur.append(self._opening(first_index + len(pages), entries[i].turn_id, cols))
                        used_t += cur[-1].tokens
                else:
                    cols = Columns(cfg)
                    for x in cur:
                        cols.place(x.line.height)
                if n > 0:  # the copy is on the page just sealed: these lines are drawn here again
                    e, n = entries[i], 0
                cols.place(e.line.height, keep(e))  # an empty page takes any one line
            repeats.remember(index, e.line.text, len(cur), e.line.style)
            cur.append(e)
            used_t += e.tokens
            i += max(1, abs(n))
        return pages, cur, cols

    def _opening(self, index: int, turn_id: int, cols: Columns) -> Entry:
        """Page `index`'s first line, its handle (`handles.py`), placed on `cols`: it stands for
        no turn's line (`covers` 0), and carries the id of the turn that follows it."""
        text = handles.drawn(self.handle_of(index))  # type: ignore[misc]
        line = Line(text, "handle", self.layout.config.handle_height)
        cols.place(line.height)
        return Entry(turn_id, line, self.entries.tokenizer.count(text), 0)

    def _reference(self, run: Sequence[Entry], copy: Entry, page: str | None = None) -> Entry | None:
        """One line standing for `run`, lines the page already shows from `copy` on (or page
        `page` shows, by its handle; None when the column has no room to quote the copy's start)."""
        measure, room = self.layout.measure("code"), self.layout.config.text_width
        anchor, lines = copy.line.text, sum(1 for e in run if e.line.style != "wrap")  # source lines
        line = repeats.reference(lines, copy.turn_id, anchor, self.layout.config.line_height, page)
        while measure(line.text) > room and anchor:  # the anchor shortened until the line fits its column
            anchor = anchor[: len(anchor) * 3 // 4]
            line = repeats.reference(lines, copy.turn_id, anchor, self.layout.config.line_height, page)
        if page is not None and len(anchor.strip()) < repeats.MIN_ANCHOR:
            return None
        tokens = self.entries.tokenizer.count(line.text)
        return Entry(run[0].turn_id, line, tokens, sum(e.covers for e in run))


class Packer:
    """Appends turns to pages. `add` seals pages for good; `view()` is a frozen snapshot to plan on.

    The packer owns its stored form: `restore` takes back the blobs `unsaved` handed out (under
    `key`), so a reopen need not lay out sealed pages again, and replays turns from where they stop.
    """

    def __init__(self, layout: Layout, tokenizer: Tokenizer, tokens_per_page: int | None = None,
                 in_place: Container[int] = frozenset(), handle: Callable[[int], str] | None = None) -> None:
        tokens_per_page = layout.config.tokens_per_page if tokens_per_page is None else tokens_per_page
        if not MIN_TOKENS_PER_PAGE <= tokens_per_page <= MAX_TOKENS_PER_PAGE:
            raise ConfigError(f"tokens_per_page={tokens_per_page} is out of range "
                              f"[{MIN_TOKENS_PER_PAGE}, {MAX_TOKENS_PER_PAGE}]")
        self.layout = layout
        self.tokenizer = tokenizer
        self.tokens_per_page = tokens_per_page
        self.entries = _Lines(layout, tokenizer, in_place)
        self._style = f"{layout.config.digest}:{layout.fonts.digest}"
        across = repeats.Across() if handle is not None and repeats.names_pages(layout) else None
        self._view = PackView((), (), Columns(layout.config), tokens_per_page, self._style, layout, self.entries,
                              handle, across, 0)
        self._resume: tuple[int, int] | None = None  # (last turn on restored pages, its lines there)
        self._saved = 0  # sealed pages already handed to the store

    @property
    def key(self) -> str:
        """Names everything that decides where pages break and what they show."""
        return f"pack{PACK_VERSION}:{self._style}:{self.tokens_per_page}:{self.tokenizer.name}"

    @property
    def sealed(self) -> tuple[Page, ...]:
        return self._view.sealed

    def view(self) -> PackView:
        return self._view

    def preview(self, turns: Iterable[Turn] = ()) -> list[Page]:
        return self._view.preview(turns)

    def restore(self, blobs: Sequence[str]) -> bool:
        """Start after pages sealed earlier under the same `key` (`unsaved` blobs): turns wholly on
        them are not laid out again, and the last one continues where its lines stop. Damaged
        blobs restore nothing (they are derived data: the turns are packed again); returns
        whether they were taken."""
        try:
            sealed = tuple(_page_from_blob(b, i, self._style) for i, b in enumerate(blobs))
        except (ValueError, KeyError, TypeError):
            return False
        across = repeats.Across()
        for page in sealed:
            if any(e.source and (e.source[0] >= page.index or e.source[1] + e.covers > len(sealed[e.source[0]].entries))
                   for e in page.entries):
                return False  # a reference to no earlier page's lines: damaged
            across.extend(page)
        self._view = replace(self._view, sealed=sealed, upto=len(across.lines),
                             across=across if self._view.across is not None else None)
        self._saved = len(sealed)
        if sealed:
            last, done = sealed[-1].entries[-1].turn_id, 0
            for page in reversed(sealed):  # a turn's lines are contiguous: count back to its start
                done += sum(e.covers for e in page.entries if e.turn_id == last)
                if any(e.covers and e.turn_id != last for e in page.entries):  # a handle covers none
                    break
            self._resume = (last, done)
        return True

    @property
    def has_unsaved(self) -> bool:
        return self._saved < len(self.sealed)

    def unsaved(self) -> tuple[int, Iterator[str]]:
        """Pages sealed since the last call (or the restore) as stored blobs: (first index, blobs).
        The blobs are made as they are read: a store that keeps nothing serializes nothing."""
        first, self._saved = self._saved, len(self.sealed)
        return first, (p.to_blob() for p in self.sealed[first:])

    @property
    def restored_upto(self) -> int:
        """The last turn on pages restored but not yet replayed, or -1."""
        return self._resume[0] if self._resume else -1

    def add(self, turn: Turn) -> list[Page]:
        """Pack one turn for good; returns the pages this sealed."""
        skip = 0
        if self._resume is not None:  # replaying turns onto restored pages
            last, done = self._resume
            if turn.id is not None and turn.id < last:
                return []  # wholly on them: no layout at all
            self._resume = None
            skip = done if turn.id == last else 0
        full, rest, cols = self._view.fill(self.entries(turn)[skip:])
        new = [Page(p.index, p.entries, True, self._style, self.tokenizer.count(p.text)) for p in full]
        v = self._view  # a new view, built directly: dataclasses.replace costs ~20 us, once per add
        if v.across is not None:
            for page in new:
                v.across.extend(page)
        self._view = PackView((*v.sealed, *new) if new else v.sealed, tuple(rest), cols, v.tokens_per_page, v.style,
                              v.layout, v.entries, v.handle_of, v.across, len(v.across.lines) if v.across else 0)
        self.entries.forget(turn)
        return new
