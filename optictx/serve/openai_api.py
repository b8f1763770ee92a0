"""The OpenAI Chat Completions API: messages in, the fitted messages out."""

from __future__ import annotations

import json
from typing import Any

from ..context import Context
from ..errors import TurnError
from ..export import to_openai
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

# What the proxy understands of a message: its roles ("developer" is the newer name of the system
# role, OpenAI's o-series docs), fields and content parts. A message with anything else is kept as
# it came, in place (`turnindex.AS_SENT`), or, where it is a tool call or result, the whole
# request goes as it came. Fields the SDK writes as null say nothing and are no surprise.
_ROLES = ("system", "developer", "user", "assistant", "tool")
_FIELDS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})
_PARTS: dict[str, frozenset[str]] = {"text": frozenset({"type", "text"}),
                                     "image_url": frozenset({"type", "image_url"})}


def _strange(message: dict[str, Any], where: str) -> str | None:
    if message.get("role") not in _ROLES:
        return f"{where}.role"
    odd = first_unknown({k: v for k, v in message.items() if v is not None}, _FIELDS, where)
    content = message.get("content")
    for j, part in enumerate(content if isinstance(content, list) else []):
        if isinstance(part, dict) and isinstance(part.get("type"), str):
            known = _PARTS.get(part["type"])
            odd = odd or (f"{where}.content[{j}].type={part['type'][:40]}" if known is None else
                          first_unknown(part, known, f"{where}.content[{j}]"))
    return odd


def kept_as_sent(message: dict[str, Any], role: Any, where: str) -> dict[str, Any]:
    """A message the proxy does not wholly understand as a turn that stays as it came, in place:
    its role where it is one a turn has, its content as text or parts where it is either (else
    its JSON, so it is counted), marked with where it was not understood."""
    content = message.get("content")
    typed = isinstance(content, list) and all(isinstance(p, dict) and isinstance(p.get("type"), str) for p in content)
    if not (isinstance(content, str) or typed):
        content = json.dumps(message, ensure_ascii=False)[:1_000_000]
    return {"role": role if role in ("system", "user", "assistant") else "user", "content": content,
            "metadata": {AS_SENT: where}}


class OpenAIChat:
    name = provider = "openai"

    def parse(self, body: dict[str, Any], raw: bytes) -> Parsed:
        model, messages = model_and_messages(body)
        turns = []
        for i, message in enumerate(messages):
            where = f"messages[{i}]"
            if not isinstance(message, dict):
                raise Unknown(where)
            message = {**message, "content": unmarked(message["content"])} if "content" in message else message
            if message.get("role") == "developer":
                message = {**message, "role": "system"}
            strange = _strange(message, where)
            if strange is not None:
                if message.get("tool_calls") or message.get("role") == "tool":
                    raise Unknown(strange)
                message = kept_as_sent(message, message.get("role"), strange)
            try:
                turns.append(to_turn(plain(message)))
            except TurnError as exc:
                raise Unknown(f"{where}: {exc}") from exc
        return Parsed(body, raw, model, body.get("stream") is True, tuple(turns), tuple(messages))

    def upstream_body(self, parsed: Parsed, ctx: Context, front: Front | None = None) -> bytes:
        if ctx.verbatim:
            return written(parsed, front)
        splice = Splice()
        messages = to_openai(ctx, as_sent(parsed), image=splice.hold) or nothing_fits(ctx)
        body = {**parsed.body, "messages": messages}
        return splice.dumps(body if front is None else front(body))

    def error(self, exc: ApiError) -> dict[str, Any]:
        return {"error": {"message": str(exc), "type": exc.kind, "param": exc.param, "code": None}}

    def stream_error(self, message: str) -> bytes:
        # The openai SDK raises APIError on an event whose data holds "error".
        return b"data: " + json.dumps({"error": {"message": message, "type": "upstream_error"}}).encode() + b"\n\n"


OPENAI = OpenAIChat()
