"""The exact words behind a page: `recall` lists the turns a page holds as they were stored, and
`search` finds the turns that hold a string, each with the page it is on. What a model reads of
either is plain text (`Recalled.text`, `Found.text`), bounded in size, with a way to go on.

One implementation for the library (`Memory.recall`, `Memory.search`) and the proxy's MCP
server (`serve/recall.py`): both hand this module the turns a store gives back, and the pages'
handles and spans.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from .errors import OptictxError
from .handles import LENGTH, PATTERN
from .store.base import Store
from .store.textindex import searchable_text, terms
from .tokens import get_tokenizer
from .turns import Turn

MAX_CHARS = 16_000  # what one recall returns at most (about 4k tokens); `offset` goes on
SEARCH_LIMIT, MAX_LIMIT = 10, 50
HIT_TOKENS = 300  # a hit's lines at most; a search's whole answer at most SEARCH_TOKENS
SEARCH_TOKENS = 2000
LINE_CHARS = 400  # a longer line (minified JSON, a log) is shown as this much around the match
SHOWN_QUERY = 200  # characters of the query said back
# A search's or a recall's own answer, stored as a tool result: never a hit (it holds the query).
OWN = re.compile(r"\[(no turn |\d+\+? turns |page [a-z0-9]+ \(turns #)")
_CONTEXT = 2  # lines shown either side of a grep's match
_SPAN = re.compile(r"#?(\d{1,9})(?:\s*-\s*#?(\d{1,9}))?")


class RecallError(OptictxError):
    """A recall or search the memory cannot answer: an unknown page, a malformed argument. Its
    message is what a tool result says."""


@dataclass(frozen=True)
class Span:
    """A page: its handle and the first and last turn it holds."""

    handle: str
    first: int
    last: int

    def label(self) -> str:
        return f"page {self.handle} (turns #{self.first}-#{self.last})"


@dataclass(frozen=True)
class Recalled:
    """What `recall` found: the page, the turns listed, and the text a model reads. `more`: the
    offset that goes on, where the listing was cut at `MAX_CHARS`."""

    page: Span
    turns: tuple[Turn, ...]
    text: str
    more: int | None


@dataclass(frozen=True)
class Hit:
    turn: Turn
    page: str | None  # its page's handle; None while the turn is recent text, on no page
    conversation: str | None = None  # the proxy's conversation id, where it searched several
    snippet: str = ""


@dataclass(frozen=True)
class Found:
    query: str
    hits: tuple[Hit, ...]
    text: str


def check_handle(page: object) -> str:
    if not isinstance(page, str) or not PATTERN.fullmatch(page.strip().removeprefix("page ").strip()):
        raise RecallError(f"page: a page handle, the {LENGTH} letters after 'page' in a page's label "
                          f"(got {str(page)[:40]!r})")
    return page.strip().removeprefix("page ").strip()


def wanted(span: Span, turns: object) -> tuple[int, int]:
    """The turns of `span` asked for: all of them, or "41-45" / "41" / 41 within it."""
    if turns is None or turns == "":
        return span.first, span.last
    m = _SPAN.fullmatch(str(turns).strip()) if isinstance(turns, (str, int)) and not isinstance(turns, bool) else None
    if m is None:
        raise RecallError(f"turns: a turn number or a range like '{span.first}-{span.last}' (got {str(turns)[:40]!r})")
    first, last = int(m.group(1)), int(m.group(2) or m.group(1))
    if first > last or first < span.first or last > span.last:
        raise RecallError(f"turns: {span.label()} holds #{span.first}-#{span.last}; asked #{first}-#{last}")
    return first, last


def shown(turn: Turn) -> str:
    """A turn as recall lists it: a header, then its text and each tool call exactly as stored."""
    who = turn.role + (f" {turn.name}" if turn.name else "") + (f" (result of {turn.tool_call_id})"
                                                                 if turn.tool_call_id else "")
    parts = [f"#{turn.id} {who}:"]
    if turn.text:
        parts.append(turn.text)
    parts += [f"[tool call {c.id}] {c.function.name} {c.function.arguments}" for c in turn.tool_calls]
    return "\n".join(parts)


def _grepped(listing: str, needle: str) -> str:
    """The lines of `listing` that hold `needle` (any case), with a little context, each run under
    the header of the turn it is in."""
    lines, low = listing.split("\n"), needle.lower()
    header, keep, last_header = {}, set(), None
    for i, line in enumerate(lines):
        if re.match(r"#\d+ ", line) and line.endswith(":"):
            last_header = i
        header[i] = last_header
        if low in line.lower():
            keep.update(range(max(0, i - _CONTEXT), min(len(lines), i + _CONTEXT + 1)))
    out, prev = [], None
    for i in sorted(keep):
        h = header[i]
        if h is not None and h not in keep and (prev is None or header[prev] != h):
            out.append(lines[h])
        elif prev is not None and i != prev + 1:
            out.append("...")
        out.append(lines[i])
        prev = i
    return "\n".join(out)


def recall(span: Span, fetch: Callable[[int, int], Iterable[Turn]], *, turns: object = None, grep: object = None,
           lines: object = None, offset: object = 0, max_chars: int = MAX_CHARS) -> Recalled:
    """The turns of page `span` (those `turns` names; of one turn, the `lines` a search numbered;
    the lines holding `grep`), listed from character `offset` for at most `max_chars`.
    `fetch(first, last)` gives the stored turns."""
    first, last = wanted(span, turns)
    if grep is not None and (not isinstance(grep, str) or not 0 < len(grep) <= 200):
        raise RecallError("grep: a string of 1 to 200 characters, found in any case")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise RecallError("offset: a character offset, 0 or more, as a cut recall's last line says")
    listed = tuple(fetch(first, last))
    body = "\n\n".join(shown(t) for t in listed)
    if lines is not None and lines != "":
        body = _lines(body, lines, first, last)
    if grep:
        body = _grepped(body, grep) or f"(no line of turns #{first}-#{last} holds {grep!r})"
    if offset and offset >= len(body):
        raise RecallError(f"offset: {offset} is past the end of turns #{first}-#{last} ({len(body)} characters)")
    piece, more = body[offset : offset + max_chars], None
    if offset + max_chars < len(body):
        cut = piece.rfind("\n", max_chars // 2)
        piece = piece[:cut] if cut > 0 else piece
        more = offset + len(piece)
    head = f"{span.label()}, turns #{first}-#{last}" + (f", lines holding {grep!r}" if grep else "")
    if offset:
        head += f", from character {offset}"
    tail = "" if more is None else (f"\n[... {len(body) - more} more characters: recall with page={span.handle!r}"
                                     + (f", turns='{first}-{last}'" if (first, last) != (span.first, span.last) else "")
                                     + (f", grep={grep!r}" if grep else "") + f", offset={more}]")
    return Recalled(span, listed, f"[{head}]\n{piece}{tail}", more)


def _lines(body: str, lines: object, first: int, last: int) -> str:
    """Lines a..b of one turn's listing (numbered as a search's hit numbers them: its header is
    line 0), under the turn's header."""
    m = _SPAN.fullmatch(str(lines).strip()) if isinstance(lines, (str, int)) and not isinstance(lines, bool) else None
    if first != last:
        raise RecallError(f"lines: give one turn with them (turns='{first}'), as a search's hit names it")
    if m is None:
        raise RecallError(f"lines: a line number or a range like '3-5' (got {str(lines)[:40]!r})")
    rows = body.split("\n")
    a, b = int(m.group(1)), int(m.group(2) or m.group(1))
    if not 1 <= a <= b or a >= len(rows):
        raise RecallError(f"lines: turn #{first} has lines 1-{len(rows) - 1}; asked {a}-{b}")
    return "\n".join([rows[0], *(f"{i}: {rows[i]}" for i in range(a, min(b, len(rows) - 1) + 1))])


def snippet(turn: Turn, terms_: Sequence[str], tokens: int = HIT_TOKENS) -> str:
    """The lines of the turn that hold its terms, whole, with a line either side, numbered by
    their line in the turn (`recall ... grep` gives the rest), at most `tokens`; a line longer
    than `LINE_CHARS` shown as that much around the match."""
    lines = "\n".join([*(t for t in turn.texts if t), *(f"{c.function.name} {c.function.arguments}"
                                                       for c in turn.tool_calls)]).split("\n")
    low = [searchable_text(x) for x in lines]
    hits = [i for i, x in enumerate(low) if any(t in x for t in terms_)] or [0]
    keep = sorted({j for i in hits for j in range(max(0, i - 1), min(len(lines), i + 2))})
    count, out, used, prev = get_tokenizer().count, [], 0, None
    for j in keep:
        line = _window(lines[j], low[j], terms_)
        cost = count(line) + 2
        if out and used + cost > tokens:
            out.append(f"... ({len(hits)} matching lines in all)")
            break
        if prev is not None and j != prev + 1:
            out.append("...")
        out.append(f"{j + 1}: {line}")
        used, prev = used + cost, j
    return "\n".join(out)


def _window(line: str, low: str, terms_: Sequence[str]) -> str:
    if len(line) <= LINE_CHARS:
        return line
    at = min((low.find(t) for t in terms_ if t in low), default=0)
    start = max(0, at - LINE_CHARS // 3)
    return ("..." if start else "") + line[start : start + LINE_CHARS] + "..."


def limit_of(limit: object) -> int:
    if limit is None:
        return SEARCH_LIMIT
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise RecallError(f"limit: 1 to {MAX_LIMIT}")
    return limit


def query_terms(query: object) -> list[str]:
    try:
        return terms(query)  # type: ignore[arg-type]
    except OptictxError as exc:
        raise RecallError(str(exc)) from None


def found(query: str, hits: Sequence[Hit], limit: int, where: str) -> Found:
    """The text a model reads of a search's hits: each hit's page, turn and lines, the best
    (newest) first, at most `SEARCH_TOKENS` in all; the query said back at most `SHOWN_QUERY`
    characters."""
    said = repr(query[:SHOWN_QUERY] + ("..." if len(query) > SHOWN_QUERY else ""))
    if not hits:
        return Found(query, (), f"[no turn {where} holds {said}]")
    count = get_tokenizer().count
    lines = [f"[{len(hits)}{'+' if len(hits) >= limit else ''} turns {where} hold {said}, newest first, each with "
             "its matching lines; recall a page with turns= or grep= for more]"]
    used, shown_hits = count(lines[0]), 0
    for h in hits:
        place = f"page {h.page}" if h.page else "recent, in the prompt as text"
        conv = f"conversation {h.conversation}, " if h.conversation else ""
        who = h.turn.role + (f" {h.turn.name}" if h.turn.name else "")
        block = f"#{h.turn.id} {who} ({conv}{place}):\n{h.snippet}"
        cost = count(block)
        if shown_hits and used + cost > SEARCH_TOKENS:
            lines.append(f"[{len(hits) - shown_hits} more hits not shown: search with within= a page, or a longer "
                         "string]")
            break
        lines.append(block)
        used, shown_hits = used + cost, shown_hits + 1
    return Found(query, tuple(hits), "\n".join(lines))


def hits_on(turns: Sequence[Turn], spans: Sequence[Span], terms_: Sequence[str],
            conversation: str | None = None) -> list[Hit]:
    """The turns found, each with the page that holds it (a span that covers it); never a
    search's or recall's own answer (it holds the query)."""
    def page_of(tid: int) -> str | None:
        return next((s.handle for s in spans if s.first <= tid <= s.last), None)

    return [Hit(t, page_of(t.id or 0), conversation, snippet(t, terms_)) for t in turns
            if not (t.role == "tool" and OWN.match(t.text or ""))]


def spans_of(pages: Iterable[object]) -> list[Span]:
    """The spans of pages that have a handle and hold a turn (`packer.Page`)."""
    out = []
    for p in pages:
        handle = getattr(p, "handle", None)
        bounds = getattr(p, "bounds", None) if handle else None
        if bounds is not None:
            out.append(Span(handle, *bounds))
    return out


def span_named(spans: Sequence[Span], page: object, where: str = "this memory") -> Span:
    handle = check_handle(page)
    for s in spans:
        if s.handle == handle:
            return s
    raise RecallError(f"page: no page {handle!r} in {where} (a page's label names its handle)")


def stored(store: Store) -> Callable[[int, int], list[Turn]]:
    """`fetch` for `recall`: turns first..last of `store`, in order."""
    return lambda first, last: [t for _, t in sorted(store.get(range(first, last + 1)).items())]


def recall_in(pages: Iterable[object], store: Store, page: object, **asked: object) -> Recalled:
    """`Memory.recall`: page `page` of these pages, its turns from `store`."""
    return recall(span_named(spans_of(pages), page), stored(store), **asked)  # type: ignore[arg-type]


def search_in(pages: Iterable[object], store: Store, query: object, *, within: object = None,
              limit: object = None) -> Found:
    """`Memory.search`: the turns of `store` that hold `query`, on these pages."""
    pages, n, want = list(pages), limit_of(limit), query_terms(query)
    if within is not None:
        span_named(spans_of(pages), within)
    turns = store.find(want, n)
    return found(str(query), hits_on(turns, covering(pages, [t.id or 0 for t in turns]), want), n,
                 "in this conversation")


def covering(pages: Sequence[object], ids: Iterable[int]) -> list[Span]:
    """The spans of the pages that hold these turns: found by bisection on the pages' first turns
    (pages hold turns in order), not by reading every page's handle, which at 10,000 turns was
    most of a search's time."""
    bounded = [(b, p) for p in pages if (b := getattr(p, "bounds", None)) is not None]
    firsts = [b[0] for b, _ in bounded]
    found: set[int] = set()
    for tid in ids:
        i = bisect.bisect_right(firsts, tid) - 1
        while i >= 0 and bounded[i][0][1] >= tid:  # a turn that runs over pages: each of them
            found.add(i)
            i -= 1
    return spans_of(bounded[i][1] for i in sorted(found))  # oldest first, as `spans_of` gives them
