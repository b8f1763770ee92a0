"""What the APIs share: a parsed request, the error a client gets back, and the interface each
API's module fills in (`openai_api.OPENAI`, `responses_api.RESPONSES`, `anthropic_api.ANTHROPIC`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..context import Context
from ..errors import OptictxError
from ..turns import Turn


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


@dataclass(frozen=True)
class Parsed:
    """A request's body and its messages as turns; `originals[i]` is what the client sent for
    turn i (written back as it came while that turn stays text). A context's turn ids are these
    positions: the memory a request is fitted through holds exactly its turns, in order, from id
    0 (`Conversations.holding` finds or forks one that does), so a dialect writes turn `t` back as
    `originals[t.id]`. `passthrough`: why the request goes upstream as it came, outside any
    conversation (it leans on state the upstream keeps)."""

    body: dict[str, Any]
    raw: bytes
    model: str
    stream: bool
    turns: tuple[Turn, ...]
    originals: tuple[Any, ...]
    passthrough: str | None = None


class Dialect(Protocol):
    name: str  # the API, as the ledger and the dashboard name it: "openai", "responses", "anthropic"
    provider: str  # whose upstream it goes to and whose usage and model names it has: "openai", "anthropic"

    def parse(self, body: Any, raw: bytes) -> Parsed:
        """The request's turns, or ApiError naming the bad field (nothing is stored then)."""
        ...

    def upstream_body(self, parsed: Parsed, ctx: Context) -> bytes:
        """The body that goes upstream: the client's own bytes for a verbatim context."""
        ...

    def error(self, exc: ApiError) -> dict[str, Any]:
        """The API's error body."""
        ...

    def stream_error(self, message: str) -> bytes:
        """An SSE event that ends a stream with an error the client's SDK raises."""
        ...


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


def model_and_messages(body: Any, messages: str = "messages") -> tuple[str, Any]:
    """The model and the messages (`messages`: the field that holds them), required and checked,
    and the tools if any (ApiError naming the field that is wrong)."""
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    for name, kind in (("model", str), (messages, list)):
        if not isinstance(body.get(name), kind) or not body[name]:
            raise ApiError(f"{name}: a non-empty {kind.__name__} is required", param=name)
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise ApiError("tools: a list of tool objects", param="tools")
    return body["model"], body[messages]
