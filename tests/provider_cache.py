"""Anthropic's and OpenAI's prompt caches as their documentation states them, for a test upstream
that reports usage the way each provider counts it: the oracle the proxy's modeled bill and
`optictx bill` are held to, written from the documented rules (platform.claude.com, "Prompt
caching" and "Images and vision"; developers.openai.com, "Prompt caching" and "Images and
vision"), never from optictx's own model of them (`optictx.promptcache`).

Anthropic (`AnthropicCache`):

- A request is its tools, then its system blocks, then its messages' content blocks, in order.
- A breakpoint is a block with `cache_control` (a top-level `cache_control` marks the last block).
  A request reads the longest cached prefix that ends at a block within 20 blocks before one of
  its breakpoints, and writes the prefix up to its last breakpoint from there, where that prefix
  has at least the model's minimum of tokens; the rest is billed as input.
- An entry lives 5 minutes (an hour where its breakpoint says `"ttl": "1h"`) from its last use.
- Text is counted with cl100k_base (the proxy's counter: the counts are not what is tested, the
  cache and the prices are); an image is w*h/750 tokens after its downscale to a 1568-px long
  edge and 1.15 megapixels.

OpenAI (`OpenAICache`, the Responses API): a prompt of at least 1,024 tokens reads the longest
prefix of it seen in the last minutes, in 128-token steps from 1,024; nothing is billed for
writing. Its prompt is its tools, its instructions, then its input items, each counted by what
the model reads of it (cl100k_base), an image by 85 + 170 a 512-px tile after its fit into
2048 px and a 768-px short side.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import struct
import threading
from typing import Any

from optictx.tokens import get_tokenizer

LOOKBACK = 20
MINIMUM = 1024


def _size(data: str) -> tuple[int, int]:
    head = base64.b64decode(data[:64] + "=" * (-len(data[:64]) % 4))
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return struct.unpack(">II", head[16:24])
    if head[:4] == b"RIFF" and head[12:16] == b"VP8L":
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if head[:4] == b"RIFF" and head[12:16] == b"VP8X":
        return int.from_bytes(head[24:27], "little") + 1, int.from_bytes(head[27:30], "little") + 1
    raise ValueError("not a PNG or WebP image")


def image_tokens(w: int, h: int) -> int:
    scale = min(1.0, 1568 / max(w, h), math.sqrt(1_150_000 / (w * h)))
    return math.ceil(math.floor(w * scale) * math.floor(h * scale) / 750)


def block_tokens(block: Any) -> int:
    count = get_tokenizer().count
    if isinstance(block, str):
        return count(block)
    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "text":
        return count(block["text"])
    if kind == "image":
        return image_tokens(*_size(block["source"]["data"]))
    if kind == "tool_result":
        content = block.get("content")
        return sum(block_tokens(p) for p in (content if isinstance(content, list) else [content or ""]))
    if kind == "tool_use":
        return count(block["name"] + json.dumps(block["input"]))
    return count(json.dumps({k: v for k, v in block.items() if k != "cache_control"}))


def _blocks(body: dict[str, Any]) -> list[Any]:
    system = body.get("system") or []
    system = [{"type": "text", "text": system}] if isinstance(system, str) else system
    messages = [b for m in body["messages"]
                for b in ([{"type": "text", "text": m["content"]}] if isinstance(m["content"], str) else m["content"])]
    return [*(body.get("tools") or []), *system, *messages]


class AnthropicCache:
    """One account's cache: `usage(body, now)` is what Anthropic reports for a request."""

    def __init__(self, minimum: int = MINIMUM) -> None:
        self.minimum = minimum
        self.entries: dict[str, float] = {}
        self.lock = threading.Lock()

    def usage(self, body: dict[str, Any], now: float) -> dict[str, Any]:
        blocks = _blocks(body)
        digests, totals, marks = [], [], []
        h, total = hashlib.sha256(), 0
        for i, b in enumerate(blocks):
            h.update(json.dumps({k: v for k, v in b.items() if k != "cache_control"} if isinstance(b, dict) else b,
                                sort_keys=True).encode())
            digests.append(h.copy().hexdigest())
            total += block_tokens(b)
            totals.append(total)
            if isinstance(b, dict) and "cache_control" in b:
                marks.append((i, (b["cache_control"] or {}).get("ttl", "5m")))
        if "cache_control" in body and blocks and (not marks or marks[-1][0] != len(blocks) - 1):
            marks.append((len(blocks) - 1, (body["cache_control"] or {}).get("ttl", "5m")))
        with self.lock:
            read_at = -1
            for m, _ in marks:
                for j in range(m, max(-1, m - LOOKBACK), -1):
                    if self.entries.get(digests[j], -1.0) >= now:
                        read_at = max(read_at, j)
                        break
            read = totals[read_at] if read_at >= 0 else 0
            written = hour = 0
            lasting = [(m, ttl) for m, ttl in marks if totals[m] >= self.minimum]
            if lasting and lasting[-1][0] > read_at:
                written = totals[lasting[-1][0]] - read
                # What lies before the last 1-hour breakpoint is written for an hour.
                hours = [m for m, ttl in lasting if ttl == "1h" and m > read_at]
                hour = totals[hours[-1]] - read if hours else 0
            for m, ttl in lasting:
                self.entries[digests[m]] = now + (3600.0 if ttl == "1h" else 300.0)
            if read_at >= 0:
                self.entries[digests[read_at]] = max(self.entries[digests[read_at]], now + 300.0)
        return {"input_tokens": total - read - written, "cache_read_input_tokens": read,
                "cache_creation_input_tokens": written,
                "cache_creation": {"ephemeral_5m_input_tokens": written - hour, "ephemeral_1h_input_tokens": hour}}


def openai_image_tokens(w: int, h: int) -> int:
    s = min(1.0, 2048 / max(w, h))
    w2, h2 = w * s, h * s
    s = min(1.0, 768 / min(w2, h2))
    return 85 + 170 * math.ceil(w2 * s / 512) * math.ceil(h2 * s / 512)


def _item_tokens(item: Any) -> int:
    """What the model reads of an input item: a message's text parts and images (by their
    tiles), a call's name and arguments, a call's output, reasoning; a tool or the instructions
    as JSON."""
    count = get_tokenizer().count
    if isinstance(item, str):
        return count(item)
    content = item.get("content") if isinstance(item, dict) else None
    if isinstance(content, list):
        return sum(openai_image_tokens(*_size(p["image_url"].split(",", 1)[1])) if p.get("type") == "input_image"
                   else count(p.get("text", "")) for p in content)
    if isinstance(content, str):
        return count(content)
    kind = item.get("type")
    if kind == "function_call":
        return count(item.get("name", "") + item.get("arguments", ""))
    if kind == "function_call_output":
        output = item.get("output")
        return count(output if isinstance(output, str) else json.dumps(output))
    return count(json.dumps(item))


class OpenAICache:
    """One account's automatic cache: `usage(body, now)` is what the Responses API reports."""

    def __init__(self) -> None:
        self.seen: dict[str, float] = {}
        self.lock = threading.Lock()

    def usage(self, body: dict[str, Any], now: float) -> dict[str, Any]:
        items = [*(body.get("tools") or []), body.get("instructions") or "", *body.get("input", [])]
        h, total, prefixes = hashlib.sha256(), 0, []
        for item in items:
            h.update(json.dumps(item, sort_keys=True).encode())
            total += _item_tokens(item)
            prefixes.append((h.copy().hexdigest(), total))
        with self.lock:
            hit = max((t for d, t in prefixes if self.seen.get(d, -1.0) >= now), default=0)
            for d, _ in prefixes:
                self.seen[d] = now + 300.0
        cached = 0 if total < 1024 or hit < 1024 else hit - hit % 128
        return {"input_tokens": total, "input_tokens_details": {"cached_tokens": cached}, "output_tokens": 11,
                "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": total + 11}
