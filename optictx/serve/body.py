"""The one writer of upstream bodies, for every dialect: `json.dumps(body).encode()` byte for
byte, without encoding our page images again.

A request carries megabytes of page images as base64 text, and encoding them was most of a
request's time once pages were sent (`BENCHMARKS.md`, "Time on the proxy path"). JSON writes a
string of base64 (or a `data:` URL of it) as itself in quotes, so each page string is written as
a placeholder and spliced back in. Our pages are recognised by content, the very strings the
exporter took from the page cache: a client's own image that happens to equal one is the same
bytes either way, and one that does not is encoded as usual.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable
from typing import Any

from ..context import Context

DATA_URL = "data:image/png;base64,"  # how the OpenAI dialects embed a page (`export._data_url`)


def dumps(body: dict[str, Any], key: str, pages: Iterable[str | None], prefix: str = "") -> bytes:
    """`body` as JSON bytes, its page images spliced in. `key`: the list of messages (or input
    items) whose content parts hold them; `pages`: their base64 text (None: not at hand, encoded
    as usual); `prefix`: what goes before it in the body (`DATA_URL` for OpenAI's APIs)."""
    by_length: dict[int, list[str]] = {}
    for page in pages:
        if page is not None:
            by_length.setdefault(len(prefix) + len(page), []).append(page)
    token = f"optictx-page-{uuid.uuid4().hex}-"
    blobs: list[str] = []

    def hold(value: Any) -> Any:
        """A placeholder for one of our page strings, anything else as it is."""
        candidates = by_length.get(len(value), ()) if isinstance(value, str) else ()
        # The very string (Anthropic's blocks hold the cache's own), or one that ends with it.
        if not any(value is p or value.endswith(p) for p in candidates) or not value.startswith(prefix):
            return value
        blobs.append(value)
        return f"{token}{len(blobs) - 1}"

    def swap(part: Any) -> Any:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "image" and isinstance(source := part.get("source"), dict):  # Anthropic
            return {**part, "source": {**source, "data": hold(source.get("data"))}} if "data" in source else part
        if kind == "image_url" and isinstance(url := part.get("image_url"), dict):  # Chat Completions
            return {**part, "image_url": {**url, "url": hold(url.get("url"))}} if "url" in url else part
        if kind == "input_image" and "image_url" in part:  # Responses
            return {**part, "image_url": hold(part["image_url"])}
        return part

    if not by_length:
        return json.dumps(body).encode()
    items = [{**m, "content": [swap(b) for b in m["content"]]} if isinstance(m, dict) and isinstance(
        m.get("content"), list) else m for m in body[key]]
    text = json.dumps({**body, key: items})  # ASCII escapes: equal JSON, encoded ~40% faster
    parts = re.split(f"{token}(\\d+)", text)
    return "".join(blobs[int(x)] if i % 2 else x for i, x in enumerate(parts)).encode()


def page_strings(ctx: Context) -> list[str | None]:
    """The base64 text of the context's page images as the exporter just embedded them, from the
    page cache (never drawn again to be found; an evicted one is None)."""
    return [p.image.png_if_cached() for p in ctx.pieces if p.image is not None]
