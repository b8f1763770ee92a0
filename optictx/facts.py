"""Factsheet: exact strings that optical compression blurs, kept verbatim beside the images.

Numbers, ids, hashes, paths, URLs, emails and dates are where OCR and VLM readers fail first and
fail silently (a 1 read as l, a digit dropped). The factsheet lists them, per turn, newest first,
as text the consumer reads exactly; it is budgeted like every other segment.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

# Order matters: earlier patterns claim their span first (a URL's path is not also a path).
# Each pattern starts only where a run of its characters starts (a lookbehind or \\b): otherwise
# one long word costs a scan per character, quadratic (a 2.4M-character word took hours).
_PATTERNS = [
    r"https?://[^\s\"'<>)\]]+",  # URLs
    r"(?<![\w.+-])[\w.+-]+@[\w-]+\.[\w.-]+",  # emails (anchored: one try per run, not per char)
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",  # UUIDs
    r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?\b",  # ISO dates / times
    r"(?<![\w/.-])/?(?:[\w.-]+/)+[\w.-]+\.\w{1,8}\b",  # relative or absolute file paths
    r"(?<![\w-])[A-Za-z]+[_-](?=[\w-]*\d)[A-Za-z0-9_-]{3,}\b",  # prefixed ids: cus_5f30, SKU-1976, call_ab12
    r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,64}\b",  # hex hashes and commit ids
    r"(?<![\w.,])\d[\d,]*\.\d+\b|(?<![\w.])\d{4,}\b",  # decimals and numbers of 4+ digits
]
_FACT = re.compile("|".join(f"(?:{p})" for p in _PATTERNS))


def find_facts(text: str) -> list[str]:
    """Exact strings in `text` worth keeping verbatim, in order of appearance, deduplicated.

    >>> find_facts("commit ee7653c9bc8d fixed ledger/tax.py; total 1093.50 on 2026-03-01")
    ['ee7653c9bc8d', 'ledger/tax.py', '1093.50', '2026-03-01']
    """
    return list(dict.fromkeys(m.group(0).rstrip(".,;:") for m in _FACT.finditer(text)))


@dataclass(frozen=True)
class Factsheet:
    """Keep up to `max_tokens` of exact strings from the turns on sealed image pages and on dropped
    pages, and never more than `budget_share` of the context budget.

    Which strings get the room, most needed first: those of dropped turns (a dropped page has lost
    every string on it; what users and the agent said before tool results, newest first), then
    those of imaged turns, oldest first (older pages are sent at blurrier tiers, and a TINY page
    loses long ids well before numbers; BENCHMARKS.md, "7-digit needles"). Strings
    the pages still show are not listed again for dropped turns.

    The memory places the lines it keeps: those of dropped turns under `gone_header` before the
    first page, those of imaged turns right after the page that shows them, in turn order. So the
    prompt only grows at its end as pages seal (prefix caches, `optictx.models`).

    >>> sheet = Factsheet()
    >>> sheet.lines({3: ("4417",), 9: ("ee7653c9bc8d",)}, len, gone={3})
    [(3, '#3 gone: 4417'), (9, '#9: ee7653c9bc8d')]
    """

    max_tokens: int = 1024
    budget_share: float = 0.1
    finder: Callable[[str], list[str]] = find_facts
    gone_header: str = "Exact strings from older turns no longer shown, verbatim (turn: values):"

    def room(self, budget: int) -> int:
        """The most tokens the sheet may take under a budget of `budget` tokens."""
        return min(self.max_tokens, int(self.budget_share * budget))

    def extract(self, text: str) -> tuple[str, ...]:
        return tuple(self.finder(text))

    def lines(self, facts: Mapping[int, Sequence[str]], count: Callable[[str], int],
              gone: Collection[int] = (), refetchable: Collection[int] = (),
              shown: Collection[str] = ()) -> list[tuple[int, str]]:
        """(turn id, line) for each turn in `facts` (turn id -> its strings) with a string to list,
        most needed first: turns in `gone` that are not `refetchable`, newest first, then gone
        `refetchable` ones, newest first, then the others, oldest first. A string is listed once
        (its first mention in that order), and not for a gone turn when `shown` has it.

        Tool results are the `refetchable` turns: an agent can run a tool again, but nobody can
        ask again what a user or the agent said (Anthropic's context editing clears old tool
        results first for the same reason).

        Stops once the lines hold more than `max_tokens`: later ones could never be shown, nor
        looked up (`facts` may be a lazy mapping).
        """
        gone, refetchable = set(gone), set(refetchable)
        order = [*sorted(gone - refetchable, reverse=True), *sorted(gone & refetchable, reverse=True),
                 *sorted(set(facts) - gone)]
        seen, hidden = set(), set(shown)  # `hidden` applies to gone turns only
        out, used = [], count(self.gone_header)
        for turn_id in order:
            if turn_id not in gone:
                hidden = seen
            new = [f for f in facts[turn_id] if f not in hidden and f not in seen]
            seen.update(new)
            if new:
                out.append((turn_id, f"#{turn_id}{' gone' if turn_id in gone else ''}: " + " ".join(new)))
                used += count(out[-1][1]) + 1
                if used > self.max_tokens:
                    break
        return out

    def select(self, lines: Sequence[tuple[int, str]], room: int,
               cost: Callable[[Sequence[tuple[int, str]]], int]) -> list[tuple[int, str]]:
        """The longest run of `lines` from the start (the most needed) whose `cost` (tokens, as
        placed) fits in `room` and `max_tokens`."""
        limit = min(room, self.max_tokens)
        lo, hi = 0, len(lines)  # a longer run never costs less: binary search its length
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if cost(lines[:mid]) <= limit else (lo, mid - 1)
        return list(lines[:lo])
