"""A check on what was read: the exact strings in a model's answer (paths, ids, hashes, long
numbers, identifiers in quoted code) that the context holds nowhere, but that are a character or
two off one that a page of it shows, are probable misreadings of that page (`Context.check`; the
proxy counts them per request). The answer itself is never changed.

A near miss is what a reader's confusion looks like (1 read as l, a digit dropped, two letters
swapped): a string the model made up differs from everything, and one it read right is found as
it is. A string held as text in the context as well is left out: the model could read it there.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

from .facts import find_facts
from .lru import LRU
from .packer import Page

_QUOTED = re.compile(r"`([^`\n]{1,400})`")
_WORD = re.compile(r"[A-Za-z_][\w.]*\w")  # an identifier, dotted names too
_MIXED = re.compile(r"(?<!\w)(?=\w*\d)(?=\w*[A-Za-z])\w{6,}")  # letters and digits: ids, hashes as misread
MIN_CHARS = 6  # shorter strings are a character off too many others to say anything
MAX_STRINGS = 200  # of an answer: a bound on the work, whatever it says
# A whole answer waits for its check (its header says what was found): past either bound the
# check stops and the answer goes with what was found so far, never late. 200 near misses of
# identifiers sharing a prefix took 40 s unbounded.
MAX_SECONDS = 0.5
MAX_CELLS = 3_000_000  # edit-distance table cells of one check (about a second of Python at most)

log = logging.getLogger("optictx.misread")


@dataclass(frozen=True)
class Misread:
    """`said` in the answer, probably a misreading of `likely`, which the page `page` shows
    (its handle; None for a page without one)."""

    said: str
    likely: str
    page: str | None

    def __str__(self) -> str:
        where = f" (page {self.page})" if self.page else ""
        return f"{self.said!r} is {self.likely!r}{where}?"


def _exact(text: str, identifiers: str) -> list[str]:
    """The exact strings of `text`: its facts (`facts.find_facts`), words of letters and digits
    (a hash with a 0 read as O is no longer a hex fact) and the identifiers in `identifiers`,
    each once, none shorter than `MIN_CHARS`."""
    found = [*find_facts(text), *_MIXED.findall(text), *_WORD.findall(identifiers)]
    return [s for s in dict.fromkeys(found) if len(s) >= MIN_CHARS]


def strings(text: str) -> list[str]:
    """The exact strings of an answer a check looks at: identifiers only where quoted as code."""
    return _exact(text, "\n".join(_QUOTED.findall(text)))[:MAX_STRINGS]


def flat(page: Page) -> str:
    """The page's text as drawn, then again with its lines joined, without and with a space (a
    line is cut at a space or, a token longer than its column, inside it; a code line's
    continuations are indented under it): a string a cut runs through is whole in one of them."""
    lines = [e.line.text for e in page.entries]
    bare = [t.strip() for t in lines]
    return "\n".join(["\n".join(lines), "".join(bare), " ".join(bare)])


_PAGES: LRU[str, tuple[str, tuple[str, ...]]] = LRU(max_items=512)  # page digest -> its flat text, strings


def _read_off(page: Page) -> tuple[str, tuple[str, ...]]:
    """A page's flat text and the strings a check compares with, once per page (a sealed page's
    text never changes; each answer's check would otherwise read every page again)."""
    hit = _PAGES.get(page.digest)
    if hit is None:
        body = flat(page)
        hit = _PAGES[page.digest] = (body, tuple(_exact(body, body)))
    return hit


def distance(a: str, b: str, most: int) -> int:
    """Levenshtein distance of `a` and `b`, or `most + 1` once it is certainly above `most`."""
    if abs(len(a) - len(b)) > most:
        return most + 1
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        low = row[0]
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
            low = min(low, row[j])
        if low > most:
            return most + 1
    return row[-1]


def check(answer: str, pages: Iterable[tuple[Page, str | None]], text: str) -> list[Misread]:
    """The probable misreadings in `answer` of the `pages` (each with its handle) a context sent
    as images, beside its `text` (everything it sent as text)."""
    shown = [(_read_off(p), handle) for p, handle in pages]
    known = "\n".join([text, *(body for (body, _), _ in shown)])
    candidates: dict[str, str | None] = {}
    for (_, found), handle in shown:
        for c in found:
            if c not in text:  # held only on a page
                candidates.setdefault(c, handle)
    by_length: dict[int, list[tuple[int, str]]] = {}  # in the pages' order: the first of two as near wins
    for i, c in enumerate(candidates):
        by_length.setdefault(len(c), []).append((i, c))
    work = _Work(time.monotonic() + MAX_SECONDS, MAX_CELLS)
    out = []
    for s in strings(answer):
        if work.over():
            log.info("the misreading check stopped after %d strings: bounded in time and work", len(out))
            break
        if _whole_in(s, known, work):
            continue
        most = 1 if len(s) < 8 else 2
        near = _nearest(s, [c for _, c in sorted(x for n in range(len(s) - most, len(s) + most + 1)
                                                for x in by_length.get(n, ()))], most, work)
        if near is not None:
            out.append(Misread(s, near, candidates[near]))
    return out


class _Work:
    """What one check may still spend: a deadline and edit-distance cells."""

    def __init__(self, deadline: float, cells: int) -> None:
        self.deadline, self.cells = deadline, cells

    def spend(self, cells: int) -> None:
        self.cells -= cells

    def over(self) -> bool:
        return self.cells <= 0 or time.monotonic() > self.deadline


def _whole_in(s: str, text: str, work: _Work) -> bool:
    """`s` is in `text` as a whole string, not as a part of a longer word (a hash read with its
    first character lost is in the hash, and still a misreading)."""
    i = text.find(s)
    while i >= 0:
        before, after = text[i - 1 : i], text[i + len(s) : i + len(s) + 1]
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return True
        work.spend(len(s))  # a prefix shared by many words is found once per word
        if work.over():
            return True  # not known either way: not flagged
        i = text.find(s, i + 1)
    return False


def _nearest(s: str, candidates: Iterable[str], most: int, work: _Work) -> str | None:
    best, best_d = None, most + 1
    for c in candidates:
        if c == s or abs(len(c) - len(s)) > most:
            continue
        work.spend(len(s) * len(c))
        if work.over():
            break
        d = distance(s, c, most)
        if 0 < d < best_d:
            best, best_d = c, d
    return best
