"""The Anthropic Messages API: `system` and content blocks in, the fitted request out, with
prompt-cache breakpoints at the end of what stays the same from one request to the next."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..context import Context
from ..errors import TurnError
from ..export import MARK, to_anthropic
from ..money import TTL
from ..turnindex import AS_SENT
from ..turns import to_turn
from .body import Splice
from .dialect import (
    ApiError,
    Front,
    Parsed,
    Unknown,
    as_sent,
    first_unknown,
    model_and_messages,
    nothing_fits,
    plain,
    unmarked,
    written,
)

MAX_BREAKPOINTS = 4  # Anthropic's limit of cache_control blocks per request (prompt caching docs)


# The content blocks the proxy understands, each with the fields it may carry. A message with
# another block or field is kept as it came, in place (`turnindex.AS_SENT`), or, where it holds a
# tool call or result (whose pair a page could split), the whole request goes as it came.
_BLOCKS: dict[str, frozenset[str]] = {
    "text": frozenset({"type", "text", "cache_control"}),
    "image": frozenset({"type", "source", "cache_control"}),
    "tool_use": frozenset({"type", "id", "name", "input", "cache_control"}),
    "tool_result": frozenset({"type", "tool_use_id", "content", "is_error", "cache_control"}),
    "thinking": frozenset({"type", "thinking", "signature"}),
    "redacted_thinking": frozenset({"type", "data"}),
    # Claude Code's ToolSearch answers with the deferred tools it loaded (the tools then go in
    # `tools` in full): a record, drawn as a placeholder on a page like any block it holds.
    "tool_reference": frozenset({"type", "tool_name", "cache_control"}),
}
_IN_RESULTS = ("text", "image", "tool_reference")  # the blocks a tool result's content may hold
_MESSAGE = frozenset({"role", "content"})
_LINKED = ("tool_use", "tool_result")


def _blocks_of(value: Any, where: str) -> list[dict[str, Any]]:
    """A list of blocks, each an object with a string type (Unknown otherwise)."""
    if not isinstance(value, list):
        raise Unknown(where)
    for j, block in enumerate(value):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise Unknown(f"{where}[{j}]")
    return value


def _strange(message: dict[str, Any], where: str) -> str | None:
    """Where a well-formed message holds a field or a block the proxy does not understand."""
    odd = first_unknown(message, _MESSAGE, where)
    content = message["content"]
    for j, block in enumerate([] if isinstance(content, str) else content):
        at = f"{where}.content[{j}]"
        known = _BLOCKS.get(block["type"])
        if known is None:
            return odd or f"{at}.type={block['type'][:40]}"
        odd = odd or first_unknown(block, known, at)
        inner = block.get("content") if block["type"] == "tool_result" else None
        for k, part in enumerate(_blocks_of(inner, f"{at}.content") if isinstance(inner, list) else []):
            if part["type"] not in _IN_RESULTS:
                return odd or f"{at}.content[{k}].type={part['type'][:40]}"
            odd = odd or first_unknown(part, _BLOCKS[part["type"]], f"{at}.content[{k}]")
    return odd


def _part(block: dict[str, Any]) -> dict[str, Any]:
    """A content block as an OpenAI-style part: images become image_url parts, so that their
    size is read and priced like any client image; other blocks are kept as they are, less the
    markers a client moves between requests (`dialect.MARKERS`)."""
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
    message's tool_result blocks become tool turns (before the rest, as the API orders them); a
    system message (a beta of the API) is a system turn in place; a message with what the proxy
    does not understand is kept as it came, in place (Unknown where it holds a tool call or result)."""
    where = f"messages[{i}]"
    if not isinstance(message, dict):
        raise Unknown(where)
    role, content = message.get("role"), message.get("content")
    if not isinstance(content, str):
        content = _blocks_of(content, f"{where}.content")
    strange = _strange(message, where) if role in ("user", "assistant", "system") else f"{where}.role"
    if strange is not None:
        if not isinstance(content, str) and any(b["type"] in _LINKED for b in content):
            raise Unknown(strange)
        kept = role if role in ("user", "assistant", "system") else "user"
        parts = content if isinstance(content, str) else [_part(b) for b in content]
        return [({"role": kept, "content": parts, "metadata": {AS_SENT: strange}}, message)]
    if isinstance(content, str):
        return [({"role": role, "content": content}, message)]
    if role == "system":
        return [({"role": "system", "content": [_part(b) for b in content]}, message)]
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


HOUR = {**MARK, "ttl": "1h"}  # our breakpoint where the client's cache lives an hour


def marks(body: dict[str, Any]) -> int:
    """The cache breakpoints a request has: its tools', its system blocks', its messages' blocks',
    and a top-level `cache_control` (automatic caching takes one)."""
    return sum(1 for _ in _controls(body))


def ttl(body: dict[str, Any]) -> TTL:
    """The lifetime the client's newest breakpoint asks for, which the prefix it writes lives:
    "1h" where it asks `"ttl": "1h"` (a write then costs 2x where a 5-minute one costs 1.25x),
    else "5m"."""
    controls = list(_controls(body))
    last = controls[-1] if controls else None
    return "1h" if isinstance(last, dict) and last.get("ttl") == "1h" else "5m"


def _controls(body: dict[str, Any]) -> Iterator[Any]:
    """Each `cache_control` of a request: the top-level one, its tools', system blocks' and
    messages' blocks'."""
    if "cache_control" in body:
        yield body["cache_control"]
    system = body.get("system")
    lists = [body.get("tools"), system if isinstance(system, list) else None,
             *(m.get("content") for m in body.get("messages") or [] if isinstance(m, dict))]
    yield from (b["cache_control"] for blocks in lists if isinstance(blocks, list) for b in blocks if _has_mark(b))


def _breakpoints(body: dict[str, Any], mark_system: bool, want: str = "5m") -> None:
    """The client's own breakpoints kept, ours (`export.MARK`, at the context's stable
    boundaries) added, the system prompt marked when ours wants it and the client's has none.
    Over Anthropic's limit of four, ours go first where the client marked the same last message,
    then from the front: the end of the pages (where a compaction's prefix is read back) is the
    last to go; ours live an hour where the client's do (`want`, `_hours`). Lists are copied,
    never written into."""
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
    _hours(lists, want)
    body["messages"] = messages
    if system is not None:
        body["system"] = system


def _hours(lists: list[list[Any]], want: str) -> None:
    """Ours live an hour where the client's cache does: where its newest mark asked an hour
    (`want`, in the request as it came) and no mark of its own before ours asks five minutes, or
    where a mark of the client's after ours asks an hour. Anthropic takes 1-hour entries only
    before 5-minute ones."""
    marked = [(blocks, j) for blocks in lists for j, b in enumerate(blocks) if _has_mark(b)]
    hours = [isinstance(c := blocks[j]["cache_control"], dict) and c.get("ttl") == "1h" for blocks, j in marked]
    theirs = [blocks[j]["cache_control"] is not MARK for blocks, j in marked]
    for i, (blocks, j) in enumerate(marked):
        if theirs[i]:
            continue
        after = any(h for h, t in zip(hours[i:], theirs[i:]) if t)
        short_before = any(t and not h for h, t in zip(hours[:i], theirs[:i]))
        if after or (want == "1h" and not short_before):
            blocks[j] = {**blocks[j], "cache_control": HOUR}


class AnthropicMessages:
    name = provider = "anthropic"

    def parse(self, body: dict[str, Any], raw: bytes) -> Parsed:
        model, messages = model_and_messages(body)
        system = body.get("system")
        pairs: list[tuple[dict[str, Any], Any]] = []
        # The system prompt is turn 0 (it stays the client's, in `system`); with none, a system
        # message in `messages` still comes after it, so it stays where it is (`TurnIndex.note`).
        if system or any(isinstance(m, dict) and m.get("role") == "system" for m in messages):
            if not isinstance(system, (str, list, type(None))):
                raise Unknown("system")
            pairs.append(({"role": "system", "content": unmarked(system or "")}, None))
        for i, message in enumerate(messages):
            pairs.extend(_turns(i, message))
        turns = []
        for n, (fields, _) in enumerate(pairs):
            try:
                turns.append(to_turn(plain(fields)))
            except TurnError as exc:
                raise Unknown("system" if n == 0 and system else f"messages: {exc}") from exc
        return Parsed(body, raw, model, body.get("stream") is True, tuple(turns), tuple(o for _, o in pairs))

    def upstream_body(self, parsed: Parsed, ctx: Context, front: Front | None = None) -> bytes:
        if ctx.verbatim:
            return written(parsed, front)
        splice = Splice()
        ours, messages = to_anthropic(ctx, as_sent(parsed), cache=True, image=splice.hold)  # the system stays theirs
        body = {**parsed.body, "messages": messages or nothing_fits(ctx)}
        body = body if front is None else front(body)
        _breakpoints(body, any(_has_mark(b) for b in ours), ttl(parsed.body))
        return splice.dumps(body)

    def error(self, exc: ApiError) -> dict[str, Any]:
        return {"type": "error", "error": {"type": exc.kind, "message": str(exc)}}

    def stream_error(self, message: str) -> bytes:
        data = json.dumps({"type": "error", "error": {"type": "api_error", "message": message}})
        return b"event: error\ndata: " + data.encode() + b"\n\n"


ANTHROPIC = AnthropicMessages()
