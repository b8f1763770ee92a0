"""How a turn, a page, a floor and the settings are written into a store's rows and read back,
the same for SQLite and PostgreSQL: JSON text behind a CRC-32 (`seal`), so a flipped byte is a
StoreError naming the store, never a silently different turn; damaged derived rows (pages,
floors) are left out and rebuilt."""

from __future__ import annotations

import contextlib
import json
import zlib
from collections.abc import Iterable
from typing import Any

from ..errors import StoreError
from ..turns import Turn


def decode_turns(rows: Iterable[tuple[int, Any]], where: object) -> list[Turn]:
    """Stored (id, body) rows as turns, each checked: its CRC-32, its JSON, and that it holds its own id."""
    rows = list(rows)
    try:
        turns = [load_turn(unseal(body)) for (_, body) in rows]
    except (ValueError, TypeError, RecursionError, StoreError) as exc:
        raise StoreError(f"{where}: corrupt turn data ({type(exc).__name__}: {exc})"[:500]) from None
    bad = next((i for (i, _), t in zip(rows, turns) if t.id != i), None)
    if bad is not None:
        raise StoreError(f"{where}: corrupt turn data (row {bad} holds another turn's id)")
    return turns


def gap_free(turns: list[Turn], after: int, where: object) -> list[Turn]:
    """`turns` (those after `after`), checked to be after+1, after+2, ...: ids are assigned
    gap-free, so a hole means rows were lost."""
    gap = next((after + 1 + n for n, t in enumerate(turns) if t.id != after + 1 + n), None)
    if gap is not None:
        raise StoreError(f"{where}: corrupt turn data (turn {gap} is missing)")
    return turns


def intact_pages(rows: Iterable[tuple[int, Any]]) -> list[str]:
    """Stored (index, body) page rows in order: only a gap-free run of intact pages from page 0 is
    usable; later ones are re-packed."""
    out = []
    for n, (idx, body) in enumerate(rows):
        try:
            if idx != n:
                break
            out.append(unseal(body))
        except StoreError:
            break
    return out


def intact_floors(rows: Iterable[tuple[Any, Any]]) -> dict[str, str]:
    """Stored (page digest, body) rows of the gate: damaged ones are left out (read again)."""
    out = {}
    for page, body in rows:
        with contextlib.suppress(StoreError):
            out[str(page)] = unseal(body)
    return out


def decode_meta(body: Any) -> dict[str, Any]:
    meta = json.loads(unseal(body))
    if not isinstance(meta, dict):
        raise StoreError(f"settings are a {type(meta).__name__}, not an object")
    return meta


def dump_turn(turn: Turn) -> str:
    # ensure_ascii: lone surrogates survive as \ud800 escapes instead of failing to encode. No
    # default=: turns hold JSON data only (turns.check_json), anything else is a bug to surface.
    return json.dumps(turn.model_dump(mode="python"), ensure_ascii=True)


def load_turn(body: str) -> Turn:
    # json.loads, not pydantic's parser: only the stdlib one accepts lone-surrogate escapes.
    return Turn.model_validate(json.loads(body))


def seal(text: str) -> str:
    """`text` prefixed with its CRC-32 (8 hex digits): a flipped byte is found on read."""
    return f"{zlib.crc32(text.encode('utf-8', 'surrogatepass')):08x}{text}"


def unseal(body: str) -> str:
    """The text of a stored row, its CRC-32 checked (rows of schema 2 and older start with '{'
    and carry none). StoreError when damaged (callers add the file's name)."""
    if not isinstance(body, str):
        raise StoreError(f"a row holds {type(body).__name__}, not text")
    if body[:1] in ("{", "[", ""):
        return body
    text = body[8:]
    if body[:8] != f"{zlib.crc32(text.encode('utf-8', 'surrogatepass')):08x}":
        raise StoreError("checksum mismatch: the row was changed after it was written")
    return text
