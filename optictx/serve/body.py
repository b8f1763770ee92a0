"""The one writer of upstream bodies, for every dialect: `json.dumps(body).encode()` byte for
byte, without encoding our page images again.

A request carries megabytes of page images as base64 text, and encoding them was most of a
request's time once pages were sent (`BENCHMARKS.md`, "Time on the proxy path"). JSON writes a
string of base64 as itself, so the exporters are given `Splice.hold` to write in place of each
page's image (`export.Image`): a placeholder, swapped for the base64 text once the rest of the
body is encoded. Nothing is read back out of our own output.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from ..pieces import PageSegment


class Splice:
    """One body's page images, held out of its JSON while it is encoded."""

    def __init__(self) -> None:
        self._token = f"optictx-page-{uuid.uuid4().hex}-"  # no client can write it into a body
        self._blobs: list[str] = []

    def hold(self, page: PageSegment) -> str:
        """What the exporter writes for `page`'s image: a placeholder for its base64 text."""
        self._blobs.append(page.image_base64())
        return f"{self._token}{len(self._blobs) - 1}"

    def dumps(self, body: dict[str, Any]) -> bytes:
        """`body` as JSON bytes with the images held for it in place: what `json.dumps` writes."""
        text = json.dumps(body)  # ASCII escapes: equal JSON, encoded ~40% faster
        if not self._blobs:
            return text.encode()
        parts = re.split(f"{self._token}(\\d+)", text)
        return "".join(self._blobs[int(x)] if i % 2 else x for i, x in enumerate(parts)).encode()
