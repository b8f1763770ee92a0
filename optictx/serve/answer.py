"""The text of an upstream's answer, whole or streamed, in each API's shape: what the misreading
check reads (`misread.py`; the proxy records what it finds, and never changes the answer)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..misread import Misread
from .meter import event_data

MAX_CHARS = 65_536  # of an answer's text: a check needs the strings in it, not a book


def text_of(api: str, body: Any) -> str:
    """The text parts of a whole answer (JSON already parsed); "" where it has none."""
    if not isinstance(body, dict):
        return ""
    parts: list[Any] = []
    if api == "anthropic":
        parts = [b.get("text") for b in _list(body.get("content")) if isinstance(b, dict) and b.get("type") == "text"]
    elif "choices" in body:  # Chat Completions
        parts = [c.get("message", {}).get("content") for c in _list(body.get("choices")) if isinstance(c, dict)
                 and isinstance(c.get("message"), dict)]
    else:  # Responses
        parts = [p.get("text") for item in _list(body.get("output")) if isinstance(item, dict)
                 for p in _list(item.get("content")) if isinstance(p, dict)]
    return "\n".join(p for p in parts if isinstance(p, str))[:MAX_CHARS]


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


class StreamText:
    """An answer's text gathered from its stream's events: Anthropic's `text_delta`s, Chat
    Completions' `delta.content`, the Responses API's `response.output_text.delta`."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.parts: list[str] = []
        self.size = 0

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def feed(self, events: bytes) -> None:
        if b"delta" not in events:
            return
        for data in event_data(events):
            if self.size >= MAX_CHARS or b"delta" not in data:
                continue
            try:
                event = json.loads(data)
            except (ValueError, RecursionError):
                continue
            piece = self._delta(event) if isinstance(event, dict) else None
            if isinstance(piece, str):
                self.parts.append(piece)
                self.size += len(piece)

    def _delta(self, event: dict[str, Any]) -> Any:
        if self.api == "anthropic":
            delta = event.get("delta")
            return delta.get("text") if isinstance(delta, dict) and delta.get("type") == "text_delta" else None
        if event.get("type") == "response.output_text.delta":
            return event.get("delta")
        choices = _list(event.get("choices"))
        delta = choices[0].get("delta") if choices and isinstance(choices[0], dict) else None
        return delta.get("content") if isinstance(delta, dict) else None


MAX_KEPT = 20  # misreadings recorded per request


def misread_json(found: Sequence[Misread]) -> str | None:
    """The misreadings a request's answer holds, as the ledger keeps them (None: none)."""
    if not found:
        return None
    return json.dumps([{"said": f.said, "likely": f.likely, "page": f.page} for f in found[:MAX_KEPT]])


MAX_HEADER = 1000  # characters of one header's value: a client's limit on all of them is often 8 KiB


def header_value(text: str, limit: int = MAX_HEADER) -> str:
    """`text` as every HTTP stack takes a header's value: printable ASCII, anything else escaped
    (`\x00`, `\u00e9`), at most `limit` characters. A reason may quote a request's text, a misread
    string a model's answer, and either may hold any character: a NUL drops the connection (the
    server's HTTP layer refuses it), a control character fails Node's fetch, and either loses
    an answer already paid for."""
    out = "".join(c if " " <= c <= "~" else ascii(c)[1:-1] for c in text[: limit + 1])
    return out[:limit]


def misread_header(found: Sequence[Misread]) -> str:
    """`X-Optictx-Misread`: how many, then each as SAID=LIKELY@PAGE (ASCII, escaped), in at most
    1000 characters."""
    out = str(len(found))
    for f in found:
        item = header_value(f"{f.said}={f.likely}@{f.page or '-'}")
        if len(out) + len(item) + 2 > 1000:
            break
        out += (" " if out.isdigit() else "; ") + item
    return out
