"""Pretty-printed JSON drawn compact: one key per row wastes most of a column.

Only whitespace between JSON tokens changes, which JSON gives no meaning: every string, number
and key stays as written (no parse-and-dump, which would rewrite `1e5`, drop duplicate keys and
reorder nothing but still lose the source's spelling). The transcript keeps the original bytes.
"""

from __future__ import annotations

import json

_OPEN = "{["
_SPACE = " \t\r\n"
_SEPARATOR = {":": ": ", ",": ", "}
_BREAK_AFTER = frozenset(",:{[")


def json_items(text: str) -> list[str] | None:
    """A multi-line JSON object or array as compact items, split where a line may break: after
    each `, `, `: `, `{` and `[`; None when `text` is not such a document."""
    body = text.strip(_SPACE)
    if "\n" not in body or not body or body[0] not in _OPEN:
        return None
    try:
        json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        return None
    items: list[str] = []
    cur: list[str] = []
    in_string = escaped = False
    for ch in body:
        if in_string:
            cur.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch in _SPACE:
            continue  # whitespace between tokens: the separators below put back what reads well
        elif ch == '"':
            in_string = True
            cur.append(ch)
        else:
            cur.append(_SEPARATOR.get(ch, ch))
            if ch in _BREAK_AFTER:
                items.append("".join(cur))
                cur = []
    items.append("".join(cur))
    return items
