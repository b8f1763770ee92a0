"""A recorded session's requests as its client sent them (request k: the messages before the k-th
call, the client's own cache breakpoints), and what a request's body holds in the provider's
cache order, as blocks with their tokens: text counted with cl100k_base, images by the cost
model."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from collections.abc import Sequence
from typing import Any

from ..cost import CostModel
from ..export import _anthropic_message, _merge_roles
from ..native import UNKNOWN_SIZE
from ..promptcache import Block
from ..sample import SYSTEM
from ..tiers import Tier
from ..tokens import get_tokenizer
from ..turns import to_turn
from .sessions import Session

EPHEMERAL = {"type": "ephemeral"}


# -- the client's requests ----------------------------------------------------------------------

def _filler(tokens: int) -> str:
    """A stand-in for a system prompt and tool definitions that were not recorded, of about
    `tokens` cl100k tokens (only its size matters to the bill)."""
    if tokens <= 0:
        return ""
    tok = get_tokenizer()
    unit = SYSTEM + "\n"
    n = max(1, tokens // max(1, tok.count(unit)))
    return unit * n


def anthropic_body(session: Session, k: int, model: str) -> dict[str, Any]:
    """Request k as Claude Code sends it: the system prompt marked, the messages so far, the last
    block marked (the breakpoint moves to the newest block on every request)."""
    head = session.messages[: session.calls[k]]
    turns = [to_turn(m) for m in head if m.get("role") != "system"]
    messages = _merge_roles([_anthropic_message(t) for t in turns]) or [
        {"role": "user", "content": [{"type": "text", "text": "(the task, not recorded)"}]}]
    last = messages[-1]
    messages[-1] = {**last, "content": [*last["content"][:-1], {**last["content"][-1], "cache_control": EPHEMERAL}]}
    system_text = "\n\n".join(str(m.get("content")) for m in head if m.get("role") == "system")
    system_text = system_text or _filler(session.system_tokens)
    body: dict[str, Any] = {"model": model, "max_tokens": 32000, "messages": messages}
    if system_text:
        body["system"] = [{"type": "text", "text": system_text, "cache_control": EPHEMERAL}]
    return body


def openai_body(session: Session, k: int, model: str) -> dict[str, Any]:
    head = [m for m in session.messages[: session.calls[k]]]
    if not any(m.get("role") == "system" for m in head) and session.system_tokens:
        head = [{"role": "system", "content": _filler(session.system_tokens)}, *head]
    return {"model": model, "messages": head}


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
    if kind == "image_url":
        url = (block.get("image_url") or {}).get("url", "")
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


def anthropic_blocks(body: dict[str, Any], cost: CostModel, counted: dict[str, int] | None = None
                     ) -> tuple[Block, ...]:
    """The body's blocks in the provider's cache order: tools, system, messages."""
    system = body.get("system") or []
    system = [{"type": "text", "text": system}] if isinstance(system, str) else system
    out = [*(body.get("tools") or []), *system]
    for m in body["messages"]:
        content = m["content"]
        out.extend([{"type": "text", "text": content}] if isinstance(content, str) else content)
    return _priced(out, cost, counted, True)


def openai_blocks(body: dict[str, Any], cost: CostModel, counted: dict[str, int] | None = None
                  ) -> tuple[Block, ...]:
    out: list[Any] = [*(body.get("tools") or [])]
    for m in body["messages"]:
        content = m.get("content")
        out.extend(content if isinstance(content, list) else [content or ""])
        if m.get("tool_calls"):
            out.append({"tool_calls": m["tool_calls"]})
    return _priced(out, cost, counted, False)


def responses_blocks(body: dict[str, Any], cost: CostModel, counted: dict[str, int] | None = None
                     ) -> tuple[Block, ...]:
    """A Responses API body's blocks in the provider's cache order: tools, instructions, then
    each input item (a message's parts one by one)."""
    out: list[Any] = [*(body.get("tools") or [])]
    if isinstance(body.get("instructions"), str):
        out.append(body["instructions"])
    for item in body["input"]:
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, list):
            out.extend({"type": "text", "text": p["text"]} if isinstance(p, dict) and isinstance(p.get("text"), str)
                       else p for p in content)
        else:
            out.append(item)
    return _priced(out, cost, counted, False)


def _tail_marked(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Claude Code's breakpoint on the newest block."""
    last = messages[-1]
    blocks = [{"type": "text", "text": last["content"]}] if isinstance(last["content"], str) else last["content"]
    return [*messages[:-1], {**last, "content": [*blocks[:-1], {**blocks[-1], "cache_control": EPHEMERAL}]}]


def native_body(session: Session, k: int) -> dict[str, Any]:
    """Request k of a client's own session file as the client sent it: its recorded system
    prompt and tools (where the file has none, a stand-in of the size the first call's usage
    leaves for them), and its items so far."""
    native = session.native
    assert native is not None
    items = native.items[: session.calls[k]]
    head = dict(native.head)
    if "tools" not in head and session.system_tokens:
        head["tools"] = [{"name": "unrecorded", "description": _filler(session.system_tokens),
                          "input_schema": {"type": "object"}} if native.api == "anthropic" else
                         {"type": "function", "name": "unrecorded", "description": _filler(session.system_tokens)}]
    if native.api == "responses":
        return {**head, "input": items, "stream": True}
    system = head.pop("system", None)
    body = {**head, "max_tokens": 32000, "messages": _tail_marked(items) if items else items}
    if system:
        body["system"] = [*system[:-1], {**system[-1], "cache_control": EPHEMERAL}]
    return body


def client_body(session: Session, k: int, api: str, model: str) -> dict[str, Any]:
    """Request k as the session's client sent it: its own requests where its file holds them,
    else the messages as an Anthropic (`api` "anthropic") or an OpenAI Chat client sends them."""
    if session.native is not None:
        return native_body(session, k)
    return anthropic_body(session, k, model) if api == "anthropic" else openai_body(session, k, model)
