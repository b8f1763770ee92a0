"""What the APIs share: a parsed request, the error a client gets back, and the interface each
API's module fills in (`openai_api.OPENAI`, `responses_api.RESPONSES`, `anthropic_api.ANTHROPIC`)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

from ..context import Context
from ..errors import OptictxError
from ..turnindex import AS_SENT
from ..turns import Turn

# An MCP server's search or recall tool named in a request, outside what the model itself wrote:
# Claude Code defers an MCP server's tools, naming them in a system message until its ToolSearch
# loads them (`proxy.recall_tools`). The model naming them (a ToolSearch call, with no such server)
# says nothing of the tools it has, and taken for a mention it changed the caption mid-conversation,
# rewriting ~43k cached tokens.
MENTION = re.compile(rb"mcp__([A-Za-z0-9_-]{1,40})__(search|recall)\b")
_MODELS_OWN = ("function_call", "custom_tool_call", "reasoning", "web_search_call")  # Responses items


def said_by_model(item: Any) -> bool:
    """Whether a message or item is the model's own (an assistant message, a Responses call)."""
    return isinstance(item, dict) and (item.get("role") == "assistant" or item.get("type") in _MODELS_OWN)


class ApiError(OptictxError):
    """A request the proxy answers itself, with `status` and the API's own error shape.
    `retry_after`: seconds, sent as Retry-After (the SDKs wait that long and try again); `close`:
    the connection is closed after the answer (a request whose framing cannot be trusted)."""

    def __init__(self, message: str, *, status: int = 400, kind: str = "invalid_request_error",
                 param: str | None = None, retry_after: int | None = None, close: bool = False) -> None:
        super().__init__(message)
        self.status, self.kind, self.param = status, kind, param
        self.retry_after, self.close = retry_after, close

    @property
    def headers(self) -> dict[str, str]:
        out = {"retry-after": str(self.retry_after)} if self.retry_after is not None else {}
        return {**out, "connection": "close"} if self.close else out


class Unknown(OptictxError):
    """A part of a request the proxy does not understand, at `where` ("messages[3].content[1]"):
    the request goes upstream as it came (`Parsed.passthrough`), never refused, since the
    upstream may take what the proxy does not know (clients add betas, roles and block types
    every few weeks). Only a body that is not a JSON object, or over the size bound, is refused."""

    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.where = where[:200]


UNKNOWN_SHAPE = "unknown-shape: {where}"  # X-Optictx-Fallback for a request sent as it came for that


@dataclass(frozen=True)
class Parsed:
    """A request's body and its messages as turns; `originals[i]` is what the client sent for
    turn i (written back as it came while that turn stays text). A context's turn ids are these
    positions: the memory a request is fitted through holds exactly its turns, in order, from id
    0 (`Conversations.holding` finds or forks one that does), so a dialect writes turn `t` back as
    `originals[t.id]`. `passthrough`: why the request goes upstream as it came, outside any
    conversation (it leans on state the upstream keeps, or its shape is not understood)."""

    body: dict[str, Any]
    raw: bytes
    model: str
    stream: bool
    turns: tuple[Turn, ...]
    originals: tuple[Any, ...]
    passthrough: str | None = None

    @cached_property
    def mentions(self) -> frozenset[bytes]:
        """Every name `MENTION` finds in the request, but in what the model wrote (its bytes are
        read first: most requests name none, and need no more)."""
        if not MENTION.search(self.raw):
            return frozenset()
        listed = {k: [i for i in v if not said_by_model(i)] if isinstance(v, list) and k in ("messages", "input")
                  else v for k, v in self.body.items()}
        return frozenset(m.group(0) for m in MENTION.finditer(json.dumps(listed).encode()))

    @cached_property
    def kept(self) -> str | None:
        """Why the last turn the proxy keeps as the client sent it is kept so (`AS_SENT`), or None."""
        return next((t.metadata[AS_SENT] for t in reversed(self.turns) if AS_SENT in t.metadata), None)

    @classmethod
    def grown(cls, head: dict[str, Any], turns: tuple[Turn, ...], originals: tuple[Any, ...],
              mentions: Iterable[bytes], kept: str | None) -> Parsed:
        """A request whose bytes were never written, built from the one before it by a caller
        that knows what it adds (`optictx bill`, `Proxy.grow`): `head`, all of it but its
        list; what the proxy would read in its bytes, given."""
        model = head.get("model")
        parsed = cls(head, b"", model if isinstance(model, str) else "", head.get("stream") is True, turns, originals)
        parsed.__dict__.update(mentions=frozenset(mentions), kept=kept)  # the cached properties, known
        return parsed

    @classmethod
    def as_it_came(cls, body: Any, raw: bytes, why: str) -> Parsed:
        """A request that goes upstream as it came, outside any conversation, for `why`."""
        fields = body if isinstance(body, dict) else {}
        model = fields.get("model")
        return cls(fields, raw, model if isinstance(model, str) else "", fields.get("stream") is True, (), (),
                   passthrough=why)


class Dialect(Protocol):
    name: str  # the API, as the ledger and the dashboard name it: "openai", "responses", "anthropic"
    provider: str  # whose upstream it goes to and whose usage and model names it has: "openai", "anthropic"

    def parse(self, body: Any, raw: bytes) -> Parsed:
        """The request's turns, or ApiError naming the bad field (nothing is stored then)."""
        ...

    def upstream_body(self, parsed: Parsed, ctx: Context, front: Front | None = None) -> bytes:
        """The body that goes upstream: the client's own bytes for a verbatim context; `front`
        rewrites what goes before the conversation (`--image-instructions`, `instructions.Instructions`)."""
        ...

    def error(self, exc: ApiError) -> dict[str, Any]:
        """The API's error body."""
        ...

    def stream_error(self, message: str) -> bytes:
        """An SSE event that ends a stream with an error the client's SDK raises."""
        ...


Front = Callable[[dict[str, Any]], dict[str, Any]]


def written(parsed: Parsed, front: Front | None) -> bytes:
    """A verbatim context's body: the client's own bytes, or its body rewritten by `front` (none
    for a request whose bytes were never written, `Parsed.grown`)."""
    return parsed.raw if front is None or not parsed.raw else json.dumps(front(parsed.body)).encode()


# Fields a client moves between requests without changing what a message says: a memory's turns
# (and so a conversation's identity) leave them out; what is sent upstream keeps them. Claude Code
# moves its cache breakpoint to the newest block on every request.
MARKERS = frozenset({"cache_control"})


def unmarked(value: Any) -> Any:
    """`value` (a message's content: a string or a list of blocks, nested in tool results)
    without MARKERS."""
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    if isinstance(value, dict):
        return {k: unmarked(v) if k == "content" else v for k, v in value.items() if k not in MARKERS}
    return value


def plain(fields: dict[str, Any]) -> dict[str, Any]:
    """A turn's fields with a content of one text part, and nothing else in it, as that text: a
    client writes one message either way from one request to the next (Claude Code puts its
    system message in a block while it marks it for the cache, and in a string after), and
    both are one turn of one conversation."""
    content = fields.get("content")
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict) and \
            content[0].keys() == {"type", "text"} and content[0]["type"] == "text" and \
            isinstance(content[0]["text"], str):
        return {**fields, "content": content[0]["text"]}
    return fields


# What goes when not one turn fits the budget (both APIs refuse a request without messages).
NOTHING_FITS = ("(the conversation does not fit the context budget of {budget} tokens; "
                "raise it with the X-Optictx-Budget header)")


def as_sent(parsed: Parsed) -> Callable[[Turn], Any]:
    """How a dialect writes a turn that stays text: as the client sent it (`Parsed`: turn ids are
    the request's positions)."""
    return lambda turn: parsed.originals[turn.id]  # type: ignore[index]


def nothing_fits(ctx: Context) -> list[dict[str, Any]]:
    """The one message sent when no turn fits the budget."""
    return [{"role": "user", "content": NOTHING_FITS.format(budget=ctx.budget.limit)}]


def model_and_messages(body: dict[str, Any], messages: str = "messages") -> tuple[str, list[Any]]:
    """The model and the messages (`messages`: the field that holds them), and the tools if any,
    as the proxy understands them (Unknown naming the field otherwise)."""
    for name, kind in (("model", str), (messages, list)):
        if not isinstance(body.get(name), kind) or not body[name]:
            raise Unknown(name)
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise Unknown("tools")
    return body["model"], body[messages]


def first_unknown(value: dict[str, Any], known: frozenset[str] | set[str], where: str) -> str | None:
    """Where `value` has a field not in `known` (the first, in sorted order), or None."""
    extra = sorted(k for k in value if k not in known)
    return f"{where}.{extra[0][:40]}" if extra else None
