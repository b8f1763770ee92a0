"""The Anthropic Messages API: `system` and content blocks in, the fitted request out, with
prompt-cache breakpoints at the end of what stays the same from one request to the next."""

from __future__ import annotations

import json
from typing import Any

from ..context import Context
from ..errors import TurnError
from ..export import MARK, to_anthropic
from ..turns import to_turn
from .body import Splice
from .dialect import ApiError, Parsed, as_sent, model_and_messages, nothing_fits, unmarked

MAX_BREAKPOINTS = 4  # Anthropic's limit of cache_control blocks per request (prompt caching docs)


def _part(block: dict[str, Any]) -> dict[str, Any]:
    """A content block as an OpenAI-style part: images become image_url parts, so that their
    size is read and priced like any client image; other blocks are kept as they are, less the
    markers a client moves between requests (`dialect.MARKERS`)."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):  # inside a tool_result
        raise ApiError("a content block is an object with a string type", param="messages")
    block = unmarked(block)
    if block["type"] == "image" and isinstance(source := block.get("source"), dict):
        if source.get("type") == "base64":
            url = f"data:{source.get('media_type')};base64,{source.get('data')}"
        else:
            url = source.get("url")
        return {"type": "image_url", "image_url": {"url": url if isinstance(url, str) else ""}}
    return block


def _result(content: Any) -> Any:
    return [_part(b) for b in content] if isinstance(content, list) else content


def _turns(i: int, message: Any) -> list[tuple[dict[str, Any], Any]]:
    """One message as OpenAI-style turn dicts, each with what the client sent for it: a user
    message's tool_result blocks become tool turns (before the rest, as the API orders them)."""
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        raise ApiError(f"messages[{i}]: a message is an object with role user or assistant", param=f"messages[{i}]")
    role, content = message["role"], message.get("content")
    if isinstance(content, str):
        return [({"role": role, "content": content}, message)]
    if not isinstance(content, list):
        raise ApiError(f"messages[{i}].content: a string or a list of blocks", param=f"messages[{i}].content")
    for j, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise ApiError(f"messages[{i}].content[{j}]: a block is an object with a string type",
                           param=f"messages[{i}].content[{j}]")
    if role == "assistant":
        calls = [{"id": b.get("id"), "function": {"name": b.get("name"), "arguments": b.get("input") or {}}}
                 for b in content if b["type"] == "tool_use"]
        parts = [_part(b) for b in content if b["type"] != "tool_use"]
        return [({"role": "assistant", "content": parts, "tool_calls": calls or None}, message)]
    results = [b for b in content if b["type"] == "tool_result"]
    rest = [b for b in content if b["type"] != "tool_result"]
    out: list[tuple[dict[str, Any], Any]] = [
        ({"role": "tool", "tool_call_id": b.get("tool_use_id"), "content": _result(b.get("content")),
          "metadata": {"is_error": True} if b.get("is_error") else {}}, {"role": "user", "content": [b]})
        for b in results]
    if rest or not results:
        out.append(({"role": "user", "content": [_part(b) for b in rest]},
                    {"role": "user", "content": rest} if results else message))
    return out


def _has_mark(block: Any) -> bool:
    return isinstance(block, dict) and "cache_control" in block


def _breakpoints(body: dict[str, Any], mark_system: bool) -> None:
    """The client's own breakpoints kept, ours (`export.MARK`, at the context's stable
    boundaries) added, the system prompt marked when ours wants it and the client's has none.
    Over Anthropic's limit of four, ours go first where the client marked the same last message,
    then from the front: the end of the pages (where a compaction's prefix is read back) is the
    last to go. Lists are copied, never written into."""
    messages = [{**m, "content": list(m["content"])} if isinstance(m["content"], list) else m
                for m in body["messages"]]
    system = body.get("system")
    system = [{"type": "text", "text": system}] if isinstance(system, str) and system else (
        list(system) if isinstance(system, list) else None)
    if mark_system and system and not any(_has_mark(b) for b in system) and isinstance(system[-1], dict):
        system[-1] = {**system[-1], "cache_control": MARK}
    lists = [*([system] if system else []), *(m["content"] for m in messages if isinstance(m["content"], list))]
    ours = [(blocks, j) for blocks in lists for j, b in enumerate(blocks)
            if _has_mark(b) and b["cache_control"] is MARK]
    theirs = sum(1 for b in (body.get("tools") or []) if _has_mark(b)) + sum(
        1 for blocks in lists for b in blocks if _has_mark(b) and b["cache_control"] is not MARK)
    last = lists[-1] if lists else []
    if any(_has_mark(b) and b["cache_control"] is not MARK for b in last):  # the client marked the end
        ours.sort(key=lambda spot: spot[0] is not last)
    for blocks, j in ours[: max(0, theirs + len(ours) - MAX_BREAKPOINTS)]:
        blocks[j] = {k: v for k, v in blocks[j].items() if k != "cache_control"}
    body["messages"] = messages
    if system is not None:
        body["system"] = system


class AnthropicMessages:
    name = provider = "anthropic"

    def parse(self, body: Any, raw: bytes) -> Parsed:
        model, messages = model_and_messages(body)
        system = body.get("system")
        pairs: list[tuple[dict[str, Any], Any]] = []
        if system:
            if not isinstance(system, (str, list)):
                raise ApiError("system: a string or a list of text blocks", param="system")
            pairs.append(({"role": "system", "content": unmarked(system)}, None))
        for i, message in enumerate(messages):
            pairs.extend(_turns(i, message))
        turns = []
        for fields, _ in pairs:
            try:
                turns.append(to_turn(fields))
            except TurnError as exc:
                raise ApiError(f"messages: {exc}", param="messages") from exc
        return Parsed(body, raw, model, body.get("stream") is True, tuple(turns), tuple(o for _, o in pairs))

    def upstream_body(self, parsed: Parsed, ctx: Context) -> bytes:
        if ctx.verbatim:
            return parsed.raw
        splice = Splice()
        ours, messages = to_anthropic(ctx, as_sent(parsed), cache=True, image=splice.hold)  # the system stays theirs
        body = {**parsed.body, "messages": messages or nothing_fits(ctx)}
        _breakpoints(body, any(_has_mark(b) for b in ours))
        return splice.dumps(body)

    def error(self, exc: ApiError) -> dict[str, Any]:
        return {"type": "error", "error": {"type": exc.kind, "message": str(exc)}}

    def stream_error(self, message: str) -> bytes:
        data = json.dumps({"type": "error", "error": {"type": "api_error", "message": message}})
        return b"event: error\ndata: " + data.encode() + b"\n\n"


ANTHROPIC = AnthropicMessages()
