"""OpenAI's Responses API (`POST /v1/responses`, what Codex CLI and newer OpenAI SDK code use):
`instructions` and `input` items in, the fitted `input` out.

Items become turns: a message (`developer` is the system role), a `function_call` an assistant
turn with one tool call, its `function_call_output` the tool turn; any other `*_call` /
`*_call_output` item with a `call_id` (custom, shell and other tools) is paired the same way,
and an item of another kind (a web search the server ran) is an assistant turn that says what
it was. `reasoning` items carry encrypted content that must go back byte for byte or not at
all: each rides with the turn after it (or, at the end, the one before), so it stays exactly
where it was while that turn stays text, and goes with it onto a page. A request that leans on
what the upstream keeps (`previous_response_id`, `item_reference`) is not a whole conversation:
it goes as it came, outside any conversation, and the answer says why (`X-Optictx-Fallback`).
"""

from __future__ import annotations

import json
from typing import Any

from ..context import Context
from ..errors import TurnError
from ..export import to_responses
from ..turns import to_turn
from .body import Splice
from .dialect import ApiError, Parsed, as_sent, model_and_messages, nothing_fits, unmarked
from .openai_api import OpenAIChat

# Items that ride with a neighbouring turn instead of being one (opaque, encrypted).
_RIDERS = frozenset({"reasoning", "compaction"})
_UPSTREAM_STATE = "upstream-state: {field}"  # X-Optictx-Fallback: what it leans on


def _text(part: dict[str, Any]) -> dict[str, Any]:
    """A Responses content part as a chat part: text kinds as text, images as image_url parts
    (so their size is read and priced like any client image), the rest as they are."""
    kind = part["type"]
    if kind in ("input_text", "output_text") and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return {"type": "text", "text": part["refusal"]}
    if kind == "input_image" and isinstance(part.get("image_url"), str):
        return {"type": "image_url", "image_url": {"url": part["image_url"]}}
    return part


def _content(value: Any, where: str) -> Any:
    if isinstance(value, str):
        return value
    if not isinstance(value, list) or not all(isinstance(p, dict) and isinstance(p.get("type"), str) for p in value):
        raise ApiError(f"{where}: a string or a list of content parts with a string type", param=where)
    return [_text(unmarked(p)) for p in value]


def _fields(i: int, item: Any) -> dict[str, Any] | None:
    """Item i as an OpenAI-style turn dict, or None for an item that rides with a turn."""
    where = f"input[{i}]"
    if not isinstance(item, dict):
        raise ApiError(f"{where}: an item is an object", param=where)
    kind = item.get("type", "message")
    if not isinstance(kind, str):
        raise ApiError(f"{where}.type: a string", param=f"{where}.type")
    if kind in _RIDERS:
        return None
    if kind == "message":
        role = item.get("role")
        if role not in ("user", "assistant", "system", "developer"):
            raise ApiError(f"{where}.role: user, assistant, system or developer", param=f"{where}.role")
        return {"role": "system" if role == "developer" else role,
                "content": _content(item.get("content"), f"{where}.content")}
    call_id = item.get("call_id")
    if kind.endswith("_call_output") and isinstance(call_id, str):
        output = item.get("output")
        content = output if isinstance(output, str) else (
            _content(output, f"{where}.output") if isinstance(output, list) else json.dumps(output))
        return {"role": "tool", "tool_call_id": call_id, "content": content}
    if kind.endswith("_call") and isinstance(call_id, str):
        name = item.get("name") if isinstance(item.get("name"), str) else kind
        arguments = next((item[k] for k in ("arguments", "input") if isinstance(item.get(k), str)), None)
        if arguments is None:
            arguments = json.dumps({k: v for k, v in item.items() if k not in ("type", "id", "call_id", "status")})
        return {"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "function": {
            "name": name, "arguments": arguments}}]}
    shown = {k: v for k, v in item.items() if k not in ("type", "id", "status")}
    return {"role": "assistant", "content": f"[{kind}] {json.dumps(shown)[:2000]}"}


class OpenAIResponses:
    name = "responses"
    provider = "openai"

    def parse(self, body: Any, raw: bytes) -> Parsed:
        if isinstance(body, dict) and isinstance(body.get("input"), str):
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
                raise ApiError("instructions: a string", param="instructions")
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
                raise ApiError("input: no message or tool item, only reasoning", param="input")
            pairs[-1][1].extend(riders)
        turns = []
        offset = len(pairs) - len(at)
        for n, (fields, _) in enumerate(pairs):
            try:
                turns.append(to_turn(fields))
            except TurnError as exc:
                where = "instructions" if n < offset else f"input[{at[n - offset]}]"
                raise ApiError(f"{where}: {exc}", param=where) from exc
        return Parsed(body, raw, model, stream, tuple(turns), tuple(o for _, o in pairs))

    def upstream_body(self, parsed: Parsed, ctx: Context) -> bytes:
        if ctx.verbatim:
            return parsed.raw
        splice, sent = Splice(), as_sent(parsed)
        items = to_responses(ctx, lambda turn: list(sent(turn)), image=splice.hold) or nothing_fits(ctx)
        return splice.dumps({**parsed.body, "input": items})

    error = OpenAIChat.error  # the same error body as Chat Completions

    def stream_error(self, message: str) -> bytes:
        # An "error" event; the openai SDK raises APIError on data that holds "error".
        data = {"type": "error", "code": "upstream_error", "message": message, "param": None,
                "error": {"message": message, "type": "upstream_error"}}
        return b"event: error\ndata: " + json.dumps(data).encode() + b"\n\n"


RESPONSES = OpenAIResponses()
