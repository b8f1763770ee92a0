"""What a store's full-text index holds of a turn, and what a query asks of it.

A turn is found by every term of a query as a substring of its text, its tool calls' names and
arguments (`Turn.texts`), ignoring case: words, and the exact strings an agent greps for (ids,
hashes, paths, `foo.bar(x)`). Each store narrows with its database's own index (SQLite FTS5
trigrams, PostgreSQL pg_trgm) and the last word is `holds`, here, the same for every store.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..errors import OptictxError
from ..turns import Turn

MAX_TERMS, MAX_TERM = 16, 200
INDEXED = 3  # a trigram index narrows by terms of this many characters or more; shorter ones are checked
_TERM = re.compile(r'"([^"]+)"|(\S+)')


class QueryError(OptictxError):
    """A search query that asks for nothing, or for too much."""


def searchable(turn: Turn) -> str:
    """The text a turn is found by, lowered, as both databases can hold it (a lone surrogate as
    "?", NUL as U+FFFD)."""
    return searchable_text("\n".join(t for t in turn.texts if t))


def searchable_text(text: str) -> str:
    """`text` as a term is found in it (`searchable`'s form)."""
    return _utf8(text.lower())


def _utf8(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8").replace("\0", "\ufffd")


def terms(query: str) -> list[str]:
    """The terms of `query`: words and "quoted phrases", lowered; each must be found."""
    if not isinstance(query, str):
        raise QueryError("query: a string")
    found = [_utf8((m.group(1) or m.group(2)).lower()) for m in _TERM.finditer(query[: MAX_TERMS * (MAX_TERM + 3)])]
    found = [t for t in dict.fromkeys(found) if t.strip()]
    if not found:
        raise QueryError("query: give a word, an exact string (an id, a path), or a \"quoted phrase\"")
    if len(found) > MAX_TERMS or any(len(t) > MAX_TERM for t in found):
        raise QueryError(f"query: at most {MAX_TERMS} terms of at most {MAX_TERM} characters")
    if all(len(t) < INDEXED for t in found):  # what an index cannot narrow: every turn would be read
        raise QueryError(f"query: at least one term of {INDEXED} characters or more")
    return found


def holds(turn: Turn, terms_: Sequence[str]) -> bool:
    text = searchable(turn)
    return all(t in text for t in terms_)


def fts5(terms_: Sequence[str]) -> str | None:
    """An FTS5 trigram MATCH for the terms long enough to narrow by, or None where none is."""
    long = [t for t in terms_ if len(t) >= INDEXED]
    return " AND ".join('"' + t.replace('"', '""') + '"' for t in long) or None


def like(term: str) -> str:
    """A LIKE pattern for `term` anywhere (backslash escapes)."""
    return "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
