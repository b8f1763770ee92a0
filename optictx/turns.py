"""Turn: one conversation message, validated, immutable, with a stable id once stored."""

from __future__ import annotations

import json
import reprlib
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import TurnError

Role = Literal["system", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
MAX_NESTING = 64  # content parts and metadata deeper than this are refused (JSON encoders recurse)


def short(value: Any) -> str:
    """A repr for an error message: bounded in depth and length (a plain repr of deeply nested
    input recurses past Python's limit, and of a huge one floods the message)."""
    return _SHORT.repr(value)[:80]


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 3, 40, 40


def check_json(value: Any, where: str) -> None:
    """Raise a clear TypeError/ValueError unless `value` is plain JSON data nested at most
    MAX_NESTING deep: turns are stored and exported as JSON, so anything else would fail later."""
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_NESTING:
            raise TurnError(f"{where} is nested more than {MAX_NESTING} levels deep")
        if isinstance(v, Mapping):
            bad = next((k for k in v if not isinstance(k, str)), None)
            if bad is not None:
                raise TurnError(f"{where} has a non-string key {short(bad)}")
            stack.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend((x, depth + 1) for x in v)
        elif not (v is None or isinstance(v, (str, int, float, bool))):
            raise TurnError(f"{where} holds a {type(v).__name__}, which is not JSON data")


class FunctionCall(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    arguments: str = Field("", description="JSON text as the model produced it, kept verbatim")

    @field_validator("arguments", mode="before")
    @classmethod
    def _dump_structured(cls, v: Any) -> Any:
        # Some clients pass arguments already parsed; keep a faithful JSON text of them (checked
        # first: json.dumps recurses, and would hit the recursion limit on deep input).
        if isinstance(v, (dict, list)):
            check_json(v, "arguments")
            return json.dumps(v, ensure_ascii=False)
        return v


class ToolCall(BaseModel):
    """An assistant's request to run a tool (OpenAI shape)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: FunctionCall


class Turn(BaseModel):
    """One message. `content` is text or a tuple of OpenAI content parts (dicts with a "type").

    >>> Turn(role="user", content="hi").text
    'hi'
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Role
    content: str | tuple[dict[str, Any], ...] = ""
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    pinned: bool = False
    id: int | None = Field(None, ge=0, description="assigned by the store; unique and stable")

    @field_validator("content", mode="before")
    @classmethod
    def _content(cls, v: Any) -> Any:
        if v is None:
            return ""
        if isinstance(v, list):
            v = tuple(v)
        if isinstance(v, tuple):
            for i, part in enumerate(v):
                if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
                    raise TurnError(f"content part {i} must be a dict with a string 'type', got {short(part)}")
                if part["type"] == "text" and not isinstance(part.get("text"), str):
                    raise TurnError(f"content part {i} is type 'text' but has no string 'text'")
                check_json(part, f"content part {i}")
            return tuple(dict(p) for p in v)
        if not isinstance(v, str):
            raise TurnError(f"content must be a string or a list of content parts, got {type(v).__name__}")
        return v

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, v: dict[str, Any]) -> dict[str, Any]:
        check_json(v, "metadata")
        return v

    @model_validator(mode="after")
    def _tool_fields(self) -> Turn:
        if self.role == "tool" and not self.tool_call_id:
            raise TurnError("a tool turn needs tool_call_id: the id of the assistant tool call it answers")
        if self.role != "tool" and self.tool_call_id:
            raise TurnError(f"tool_call_id is only valid on tool turns, not on a {self.role} turn")
        if self.tool_calls and self.role != "assistant":
            raise TurnError(f"tool_calls are only valid on assistant turns, not on a {self.role} turn")
        if self.pinned and (self.role == "tool" or self.tool_calls):
            raise TurnError("tool calls and tool results cannot be pinned (their pair would split); "
                             "pin a user or assistant turn that restates what matters")
        return self

    @property
    def text(self) -> str:
        """The text of the content; non-text parts appear as short bracketed placeholders."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(_part_text(p) for p in self.content)

    @property
    def texts(self) -> tuple[str, ...]:
        """Everything the turn says as text: `text`, then each tool call's name and arguments.
        What its native tokens count, what the factsheet searches, what limits measure."""
        return (self.text, *(s for c in self.tool_calls for s in (c.function.name, c.function.arguments)))

    @property
    def call_ids(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.tool_calls)

    def to_openai(self) -> dict[str, Any]:
        """This turn as an OpenAI chat message dict."""
        msg: dict[str, Any] = {"role": self.role}
        if isinstance(self.content, str):
            msg["content"] = self.content
        else:
            msg["content"] = [dict(p) for p in self.content]
        if self.name and self.role in ("system", "user", "assistant"):
            msg["name"] = self.name
        if self.tool_calls:
            msg["tool_calls"] = [c.model_dump() for c in self.tool_calls]
            if msg["content"] == "":
                msg["content"] = None
        if self.role == "tool":
            msg["tool_call_id"] = self.tool_call_id
        return msg


def image_url(part: Mapping[str, Any]) -> str:
    """An image part's URL ("" if none): clients send {"url": ...} or, some, the URL as a bare string."""
    value = part.get("image_url")
    url = value.get("url") if isinstance(value, Mapping) else value
    return url if isinstance(url, str) else ""


def _part_text(part: Mapping[str, Any]) -> str:
    kind = part["type"]
    if kind == "text":
        return part["text"]
    if kind in ("image_url", "input_image", "image"):
        return "[image]"
    return f"[{kind}]"


_KNOWN = frozenset(Turn.model_fields) - {"id", "pinned"}


def to_turn(message: Turn | Mapping[str, Any]) -> Turn:
    """Coerce an OpenAI-style dict (or a Turn) into a validated Turn; TurnError naming the field.

    A Turn is validated again: `model_copy(update=...)` makes Turns pydantic never checked.
    Keys the OpenAI SDK emits but optictx does not model (refusal, audio, annotations...) are
    kept under metadata["extra"] when they carry a value, and dropped when they are None.
    """
    if isinstance(message, Turn):
        return _validated(dict(message))
    if not isinstance(message, Mapping):
        raise TurnError(f"a turn must be a Turn or a dict like {{'role': 'user', 'content': '...'}}, "
                        f"got {type(message).__name__}")
    role = message.get("role")
    if role not in ROLES:
        raise TurnError(f"unknown role {short(role)}; valid roles: {', '.join(ROLES)}")
    fields = {k: v for k, v in message.items() if k in _KNOWN or k == "pinned"}
    extra = {k: v for k, v in message.items() if k not in fields and k != "id" and v is not None}
    if extra:
        metadata = fields.get("metadata") or {}
        if not isinstance(metadata, Mapping):
            raise TurnError(f"turn field metadata: must be a dict, got {type(metadata).__name__}")
        fields["metadata"] = {**metadata, "extra": extra}
    if fields.get("tool_calls") is None:
        fields.pop("tool_calls", None)
    return _validated(fields)


def _validated(fields: dict[str, Any]) -> Turn:
    try:
        return Turn.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(map(str, err["loc"]))
        cause = err.get("ctx", {}).get("error")
        message = str(cause) if cause is not None else err["msg"]
        raise TurnError(f"turn field {where}: {message}" if where else f"turn: {message}") from exc
