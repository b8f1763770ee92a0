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
    """Keep up to `max_tokens` of exact strings from the turns on image pages and on dropped pages,
    and never more than `budget_share` of the context budget: on small budgets a full sheet would
    push out the pages it lists (`optictx niah`'s default grid: at budgets of 2,000 and 4,000
    tokens an uncapped sheet cost one needle in five).

    Dropped turns come first, newest first, then imaged ones, newest first: a dropped page has lost
    every string on it, a TINY page still reads 97-100% of 7-digit numbers (BENCHMARKS.md)."""

    max_tokens: int = 512
    budget_share: float = 0.1
    finder: Callable[[str], list[str]] = find_facts
    header: str = "Exact strings from older turns, verbatim (turn: values; gone = no longer shown above):"

    def cap(self, budget: int) -> int:
        """The most tokens the sheet may take under a budget of `budget` tokens."""
        return min(self.max_tokens, int(self.budget_share * budget))

    def extract(self, text: str) -> tuple[str, ...]:
        return tuple(self.finder(text))

    def lines(self, facts: Mapping[int, Sequence[str]], count: Callable[[str], int],
              gone: Collection[int] = ()) -> list[str]:
        """One line per turn (turn id -> its facts) that has facts: turns in `gone` first, each
        group newest first; a fact is listed once (first mention in that order).

        Stops once the lines hold more than `max_tokens`: later ones could never be shown, nor
        looked up (`facts` may be a lazy mapping).
        """
        seen: set[str] = set()
        out, used = [], count(self.header)
        for turn_id in sorted(facts, key=lambda t: (t in gone, t), reverse=True):
            new = [f for f in facts[turn_id] if f not in seen]
            seen.update(new)
            if new:
                out.append(f"#{turn_id}{' gone' if turn_id in gone else ''}: " + " ".join(new))
                used += count(out[-1]) + 1
                if used > self.max_tokens:
                    break
        return out

    def build(self, lines: Sequence[str], room: int, count: Callable[[str], int]) -> str:
        """The header and as many `lines` as fit in `room` tokens (and `max_tokens`); "" if none fits.
        Lines are cut from the end (the least needed, in `lines`' order)."""
        limit = min(room, self.max_tokens)
        kept = list(lines)
        while kept:
            text = "\n".join([self.header, *kept])
            over = count(text) - limit
            if over <= 0:
                return text
            # Drop from the end, about as many lines as the excess needs.
            per_line = max(1, count(text) // (len(kept) + 1))
            del kept[-max(1, over // per_line):]
        return ""
