"""The OpenAI Chat Completions API: messages in, the fitted messages out."""

from __future__ import annotations

import json
from typing import Any

from ..context import Context
from ..errors import TurnError
from ..export import to_openai
from ..turns import to_turn
from .body import Splice
from .dialect import ApiError, Parsed, as_sent, model_and_messages, nothing_fits, unmarked


class OpenAIChat:
    name = provider = "openai"

    def parse(self, body: Any, raw: bytes) -> Parsed:
        model, messages = model_and_messages(body)
        turns = []
        for i, message in enumerate(messages):
            # "developer" is the newer name of the system role (OpenAI's o-series docs).
            if isinstance(message, dict) and message.get("role") == "developer":
                message = {**message, "role": "system"}
            if isinstance(message, dict) and "content" in message:
                message = {**message, "content": unmarked(message["content"])}
            try:
                turns.append(to_turn(message))
            except TurnError as exc:
                raise ApiError(f"messages[{i}]: {exc}", param=f"messages[{i}]") from exc
        return Parsed(body, raw, model, body.get("stream") is True, tuple(turns), tuple(messages))

    def upstream_body(self, parsed: Parsed, ctx: Context) -> bytes:
        if ctx.verbatim:
            return parsed.raw
        splice = Splice()
        messages = to_openai(ctx, as_sent(parsed), image=splice.hold) or nothing_fits(ctx)
        return splice.dumps({**parsed.body, "messages": messages})

    def error(self, exc: ApiError) -> dict[str, Any]:
        return {"error": {"message": str(exc), "type": exc.kind, "param": exc.param, "code": None}}

    def stream_error(self, message: str) -> bytes:
        # The openai SDK raises APIError on an event whose data holds "error".
        return b"data: " + json.dumps({"error": {"message": message, "type": "upstream_error"}}).encode() + b"\n\n"


OPENAI = OpenAIChat()
