"""Pretty-printed JSON drawn compact: one key per row wastes most of a column.

Only whitespace between JSON tokens changes, which JSON gives no meaning: every string, number
and key stays as written (a parse-and-dump would rewrite `1e5` and drop duplicate keys). The
transcript keeps the original bytes.
"""

from __future__ import annotations

import json
import re

# A JSON string (escapes included), one break-point mark, or a run of anything else but blanks
# (numbers, literals, closing brackets): the whitespace between them is what goes.
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[,:{\[]|[^\s",:{\[]+')
_SEPARATOR = {":": ": ", ",": ", "}


def json_items(text: str) -> list[str] | None:
    """A multi-line JSON object or array as compact items, split where a line may break: after
    each `, `, `: `, `{` and `[`; None when `text` is not such a document."""
    body = text.strip()
    if "\n" not in body or body[0] not in "{[":
        return None
    try:
        json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than the parser goes
        return None
    items: list[str] = []
    cur: list[str] = []
    for token in _TOKEN.findall(body):
        cur.append(_SEPARATOR.get(token, token))
        if token in "{[,:":  # one character: a break point (a string or a run is never one of these)
            items.append("".join(cur))
            cur = []
    items.append("".join(cur))
    return items
