"""OpenAI's Responses API (`POST /v1/responses`, what Codex CLI and newer OpenAI SDK code use):
`instructions` and `input` items in, the fitted `input` out.

Items become turns: a message (`developer` is the system role), a `function_call` an assistant
turn with one tool call, its `function_call_output` the tool turn; any other `*_call` /
`*_call_output` item with a `call_id` (custom, shell and other tools) is paired the same way.
An item of another kind (a web search the server ran), or a message with a field or part the
proxy does not know, stays as it came, in place. `reasoning` items carry encrypted content that
must go back byte for byte or not at all: each rides with the turn after it (or, at the end, the
one before), so it stays exactly where it was while that turn stays text, and goes with it onto
a page. A request that leans on what the upstream keeps (`previous_response_id`,
`item_reference`) is not a whole conversation: it goes as it came, outside any conversation,
and the answer says why (`X-Optictx-Fallback`).
"""

from __future__ import annotations

import json
from typing import Any

from ..context import Context
from ..errors import TurnError
from ..export import to_responses
from ..turns import to_turn
from .body import Splice
from .dialect import (
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
from .openai_api import OpenAIChat, kept_as_sent

# Items that ride with a neighbouring turn instead of being one (opaque, encrypted).
_RIDERS = frozenset({"reasoning", "compaction"})
_UPSTREAM_STATE = "upstream-state: {field}"  # X-Optictx-Fallback: what it leans on


# What the proxy understands of a message item: its fields and its content parts. An item with
# anything else, or of a kind that is neither a message, a call, its output nor a rider, stays as
# it came, in place (`turnindex.AS_SENT`); a call or a call's output the proxy cannot read sends
# the whole request as it came.
_MESSAGE = frozenset({"type", "id", "role", "content", "status"})
_PARTS: dict[str, frozenset[str]] = {
    "input_text": frozenset({"type", "text"}),
    "output_text": frozenset({"type", "text", "annotations", "logprobs"}),
    "refusal": frozenset({"type", "refusal"}),
    "input_image": frozenset({"type", "image_url", "detail"}),
}


def _text(part: dict[str, Any]) -> dict[str, Any]:
    """A Responses content part as a chat part: text kinds as text, images as image_url parts
    (so their size is read and priced like any client image)."""
    kind = part["type"]
    if kind in ("input_text", "output_text"):
        return {"type": "text", "text": part["text"]}
    if kind == "refusal":
        return {"type": "text", "text": part["refusal"]}
    return {"type": "image_url", "image_url": {"url": part["image_url"]}}


def _parts(value: Any, where: str) -> list[dict[str, Any]]:
    """Content parts, each an object with a string type (Unknown otherwise)."""
    if not isinstance(value, list) or not all(isinstance(p, dict) and isinstance(p.get("type"), str) for p in value):
        raise Unknown(where)
    return value


def _readable(part: dict[str, Any]) -> bool:
    """Whether the proxy reads this part: a known kind with its fields of the types it needs."""
    known = _PARTS.get(part["type"])
    field = {"input_image": "image_url", "refusal": "refusal"}.get(part["type"], "text")
    return known is not None and not set(part) - known and isinstance(part.get(field), str)


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role, content = item.get("role"), item.get("content")
    parts = None if isinstance(content, str) else _parts(content, f"{where}.content")
    odd = first_unknown(item, _MESSAGE, where) or next(
        (f"{where}.content[{j}]" for j, p in enumerate(parts or []) if not _readable(unmarked(p))), None)
    if role not in ("user", "assistant", "system", "developer"):
        odd = f"{where}.role"
    if odd is not None:
        return kept_as_sent(item, role, odd)
    return {"role": "system" if role == "developer" else role,
            "content": content if parts is None else [_text(unmarked(p)) for p in parts]}


def _fields(i: int, item: Any) -> dict[str, Any] | None:
    """Item i as an OpenAI-style turn dict, or None for an item that rides with a turn."""
    where = f"input[{i}]"
    if not isinstance(item, dict) or not isinstance(item.get("type", "message"), str):
        raise Unknown(where)
    kind = item.get("type", "message")
    if kind in _RIDERS:
        return None
    if kind == "message":
        return _message(item, where)
    call_id = item.get("call_id")
    if (kind == "function_call" or kind.endswith("_call_output")) and not isinstance(call_id, str):
        raise Unknown(f"{where}.call_id")  # a call or output that cannot be paired with its other half
    if kind.endswith("_call_output"):
        output = item.get("output")
        if isinstance(output, list):
            parts = _parts(output, f"{where}.output")
            odd = next((f"{where}.output[{j}]" for j, p in enumerate(parts) if not _readable(p)), None)
            if odd is not None:  # a page could not show it, and its call must stay beside it
                raise Unknown(odd)
        content = output if isinstance(output, str) else (
            [_text(p) for p in output] if isinstance(output, list) else json.dumps(output))
        return {"role": "tool", "tool_call_id": call_id, "content": content}
    if kind.endswith("_call") and isinstance(call_id, str):
        name = item.get("name") if isinstance(item.get("name"), str) else kind
        arguments = next((item[k] for k in ("arguments", "input") if isinstance(item.get(k), str)), None)
        if arguments is None:
            arguments = json.dumps({k: v for k, v in item.items() if k not in ("type", "id", "call_id", "status")})
        return {"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "function": {
            "name": name, "arguments": arguments}}]}
    return kept_as_sent(item, "assistant", f"{where}.type={kind[:40]}")


class OpenAIResponses:
    name = "responses"
    provider = "openai"

    def parse(self, body: dict[str, Any], raw: bytes) -> Parsed:
        if isinstance(body.get("input"), str):
            body = {**body, "input": [{"role": "user", "content": body["input"]}]}
        model, items = model_and_messages(body, "input")
        stream = body.get("stream") is True
        held = "previous_response_id" if body.get("previous_response_id") is not None else next(
            ("item_reference" for item in items if isinstance(item, dict) and item.get("type") == "item_reference"),
            None)
        if held is not None:
            return Parsed(body, raw, model, stream, (), (), passthrough=_UPSTREAM_STATE.format(field=held))
        pairs: list[tuple[dict[str, Any], list[Any]]] = []
        instructions = body.get("instructions")
        if instructions is not None:
            if not isinstance(instructions, str):
                raise Unknown("instructions")
            pairs.append(({"role": "system", "content": instructions}, []))  # stays in the body, as it came
        riders: list[Any] = []
        at: list[int] = []  # the input index of each pair's turn
        for i, item in enumerate(items):
            fields = _fields(i, item)
            if fields is None:
                riders.append(item)
                continue
            pairs.append((fields, [*riders, item]))
            at.append(i)
            riders = []
        if riders:
            if not at:
                raise Unknown("input: only reasoning items")
            pairs[-1][1].extend(riders)
        turns = []
        offset = len(pairs) - len(at)
        for n, (fields, _) in enumerate(pairs):
            try:
                turns.append(to_turn(plain(fields)))
            except TurnError as exc:
                where = "instructions" if n < offset else f"input[{at[n - offset]}]"
                raise Unknown(f"{where}: {exc}") from exc
        return Parsed(body, raw, model, stream, tuple(turns), tuple(o for _, o in pairs))

    def upstream_body(self, parsed: Parsed, ctx: Context, front: Front | None = None) -> bytes:
        if ctx.verbatim:
            return written(parsed, front)
        splice, sent = Splice(), as_sent(parsed)
        items = to_responses(ctx, lambda turn: list(sent(turn)), image=splice.hold) or nothing_fits(ctx)
        body = {**parsed.body, "input": items}
        return splice.dumps(body if front is None else front(body))

    error = OpenAIChat.error  # the same error body as Chat Completions

    def stream_error(self, message: str) -> bytes:
        # An "error" event; the openai SDK raises APIError on data that holds "error".
        data = {"type": "error", "code": "upstream_error", "message": message, "param": None,
                "error": {"message": message, "type": "upstream_error"}}
        return b"event: error\ndata: " + json.dumps(data).encode() + b"\n\n"


RESPONSES = OpenAIResponses()
