"""What a request's body holds in the provider's cache order, as blocks with their tokens: text
counted with cl100k_base, images by the cost model; for a session's requests as its client grows
them (`requests.py`), one chain of blocks grown with them (`Client`)."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
from collections.abc import Callable, Sequence
from typing import Any

from ..cost import CostModel
from ..native import UNKNOWN_SIZE
from ..promptcache import Block, Chain, Prefixes
from ..serve.dialect import said_by_model
from ..tiers import Tier
from ..tokens import get_tokenizer

# -- what a body costs --------------------------------------------------------------------------

def _image_size(data: str) -> tuple[int, int]:
    """An image's size from the head of its base64 (PNG, or WebP as optictx sends its pages),
    without decoding it."""
    try:
        raw = base64.b64decode(data[:64] + "=" * (-len(data[:64]) % 4))
    except ValueError:
        return UNKNOWN_SIZE
    if raw[:8] == b"\x89PNG\r\n\x1a\n" and len(raw) >= 24:
        return struct.unpack(">II", raw[16:24])
    if raw[:4] == b"RIFF" and raw[8:16] == b"WEBPVP8L" and len(raw) >= 25:  # lossless: 14-bit sizes less one
        bits = int.from_bytes(raw[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if raw[:4] == b"RIFF" and raw[8:16] == b"WEBPVP8X" and len(raw) >= 30:  # extended: 24-bit sizes less one
        return int.from_bytes(raw[24:27], "little") + 1, int.from_bytes(raw[27:30], "little") + 1
    return UNKNOWN_SIZE


def _key(block: Any) -> str:
    if isinstance(block, dict):
        block = {k: v for k, v in block.items() if k != "cache_control"}
    return hashlib.sha256(json.dumps(block, sort_keys=True).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _tokens(block: Any, cost: CostModel) -> int:
    """A block's input tokens: text counted, images priced by the cost model."""
    count = get_tokenizer().count
    if isinstance(block, str):
        return count(block)
    if not isinstance(block, dict):
        return count(json.dumps(block))
    kind = block.get("type")
    if kind == "text":
        return count(str(block.get("text", "")))
    if kind == "image":
        source = block.get("source") or {}
        size = _image_size(source.get("data", "")) if source.get("type") == "base64" else UNKNOWN_SIZE
        return cost.image_tokens(Tier.GUNDAM, size)
    if kind in ("image_url", "input_image"):  # Chat Completions nests the URL; the Responses API does not
        url = block.get("image_url")
        url = url.get("url", "") if isinstance(url, dict) else url if isinstance(url, str) else ""
        size = _image_size(url.split(",", 1)[1]) if url.startswith("data:") and "," in url else UNKNOWN_SIZE
        return cost.image_tokens(Tier.GUNDAM, size)
    if kind == "tool_result":
        content = block.get("content")
        parts = content if isinstance(content, list) else [content or ""]
        return sum(_tokens(p, cost) for p in parts) + 4
    if kind == "tool_use":
        return count(str(block.get("name", "")) + json.dumps(block.get("input"))) + 4
    return count(json.dumps({k: v for k, v in block.items() if k != "cache_control"}))


def _priced(blocks: Sequence[Any], cost: CostModel, counted: dict[str, int] | None, marked: bool) -> tuple[Block, ...]:
    """Blocks keyed by their content less any cache mark, their tokens counted once per key."""
    counted = {} if counted is None else counted
    out = []
    for b in blocks:
        key = _key(b)
        if key not in counted:
            counted[key] = _tokens(b, cost)
        out.append(Block(key, counted[key], marked and isinstance(b, dict) and "cache_control" in b))
    return tuple(out)


def _anthropic_head(body: dict[str, Any]) -> list[Any]:
    system = body.get("system") or []
    return [*(body.get("tools") or []), *([{"type": "text", "text": system}] if isinstance(system, str) else system)]


def _anthropic_item(message: dict[str, Any]) -> list[Any]:
    content = message["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def _openai_item(message: dict[str, Any]) -> list[Any]:
    content = message.get("content")
    out = list(content) if isinstance(content, list) else [content or ""]
    return [*out, {"tool_calls": message["tool_calls"]}] if message.get("tool_calls") else out


def _responses_head(body: dict[str, Any]) -> list[Any]:
    instructions = body.get("instructions")
    return [*(body.get("tools") or []), *([instructions] if isinstance(instructions, str) else [])]


def _responses_item(item: Any) -> list[Any]:
    content = item.get("content") if isinstance(item, dict) else None
    if isinstance(content, list):
        return [{"type": "text", "text": p["text"]} if isinstance(p, dict) and isinstance(p.get("text"), str) else p
                for p in content]
    return [item]


def _tools(body: dict[str, Any]) -> list[Any]:
    return list(body.get("tools") or [])


# Each API's body in the provider's cache order: what goes before the list (tools; a system
# prompt, instructions), then each item's blocks; whether cache marks count (Anthropic's only).
SHAPES: dict[str, tuple[str, Callable[[dict[str, Any]], list[Any]], Callable[[Any], list[Any]], bool]] = {
    "anthropic": ("messages", _anthropic_head, _anthropic_item, True),
    "openai": ("messages", _tools, _openai_item, False),
    "responses": ("input", _responses_head, _responses_item, False),
}


def blocks_of(api: str, body: dict[str, Any], cost: CostModel, counted: dict[str, int] | None = None
              ) -> tuple[Block, ...]:
    """The body's blocks in the provider's cache order, priced."""
    key, head, item, marked = SHAPES[api]
    return _priced([*head(body), *(b for one in body[key] for b in item(one))], cost, counted, marked)


class Client:
    """A sequence of requests as the provider's cache sees them, each priced from the one before:
    one chain of block prefixes (`promptcache.Chain`) whose blocks from the first item that
    differs are redone; with a `pattern`, also the request's bytes as JSON and what a proxy reads
    in them besides (`named`: every match of the pattern, found once per item), which optictx's
    own requests need not (their bytes are at hand). A client grows its requests so
    (`Requests.to` says where they differ); optictx's are compared (`sent`)."""

    def __init__(self, api: str, cost: CostModel, counted: dict[str, int],
                 pattern: re.Pattern[bytes] | None = None) -> None:
        self.api, self.cost, self.counted, self.pattern = api, cost, counted, pattern
        self.chain = Chain()
        self.named: set[bytes] = set()
        self._starts: list[int] = []  # the chain index of each item's first block
        self._sizes: list[int] = []  # each item's bytes
        self._marks: list[int] = []  # the chain indexes of marked blocks
        self._size = self._items_size = 0  # the head's bytes, the items'
        self._last: tuple[dict[str, Any], list[Any]] | None = None  # the last request `sent` gave

    def update(self, head: dict[str, Any], items: list[Any], first: int | None, at: float) -> Prefixes:
        """A request of `head` and `items` (the API's list), whose items from `first` on differ
        from the last request's (None: its head does too, or there was none)."""
        key, of_head, of_item, marked = SHAPES[self.api]
        if first is None:
            self.chain, self._starts, self._sizes, self._marks, self._items_size = Chain(), [], [], [], 0
            self.named = set()
            self._push(of_head(head), marked)
            self._size, first = self._read({**head, key: []}), 0
        cut = self._starts[first] if first < len(self._starts) else len(self.chain)
        self.chain.cut(cut)
        self._items_size -= sum(self._sizes[first:])
        del self._starts[first:], self._sizes[first:]
        self._marks = [m for m in self._marks if m < cut]
        for one in items[first:]:
            self._starts.append(len(self.chain))
            self._push(of_item(one), marked)
            self._sizes.append(self._read(one, heard=not said_by_model(one)))
            self._items_size += self._sizes[-1]
        return Prefixes(self.chain, len(self.chain), tuple(self._marks), at)

    def _read(self, value: Any, heard: bool = True) -> int:
        """`value`'s bytes as JSON, what the pattern finds in them noted where `heard` (not what
        the model wrote: `dialect.said_by_model`) (0, nothing read, without a pattern)."""
        if self.pattern is None:
            return 0
        text = json.dumps(value).encode()
        if heard:
            self.named.update(m.group(0) for m in self.pattern.finditer(text))
        return len(text)

    def sent(self, body: dict[str, Any], at: float) -> Prefixes:
        """A request given whole (optictx's, as the proxy wrote it): what it shares with the last
        one given so (its head, its first items) is not priced again."""
        key = SHAPES[self.api][0]
        head = {k: v for k, v in body.items() if k != key}
        items = body[key]
        first = None
        if self._last is not None and head == self._last[0]:
            old = self._last[1]
            n = min(len(old), len(items))
            first = n if old[:n] == items[:n] else next(i for i in range(n) if old[i] != items[i])
        self._last = (head, items)
        return self.update(head, items, first, at)

    @property
    def bytes(self) -> int:
        """The request's JSON (`json.dumps`), its items ", " apart."""
        return self._size + self._items_size + 2 * max(0, len(self._sizes) - 1)

    def _push(self, blocks: list[Any], marked: bool) -> None:
        for b in _priced(blocks, self.cost, self.counted, marked):
            if b.breakpoint:
                self._marks.append(len(self.chain))
            self.chain.push(b.key, b.tokens)
