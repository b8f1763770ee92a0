"""A recorded session's requests as its client sent them, each built from the one before.

Request k carries the session's messages (or a client's own items) before its k-th call. A client
sends one request as the one before it with the newest turns added; what it may rewrite is only
the last item of the one before: Claude Code moves its cache mark to the newest block, and
consecutive turns of one role merge into one Anthropic message. So request k is built from
request k-1 in the time of its new items, and `optictx bill` replays a session of any length in
time proportional to it (`bill.py`); `body()` writes one request whole, as the wire carries it.
"""

from __future__ import annotations

from typing import Any

from ..export import _anthropic_message, merge_into
from ..sample import SYSTEM
from ..tokens import get_tokenizer
from ..turns import to_turn
from .sessions import Session

EPHEMERAL = {"type": "ephemeral"}
TASK = "(the task, not recorded)"  # a request before any message was recorded
SO_FAR = "(the conversation so far continues below)"  # Anthropic's first message is the user's


# No model's window holds more: a stand-in larger than this comes of a damaged usage record (every
# field at 10^9 asked for 3x10^9 tokens of text, and died of MemoryError).
MAX_STAND_IN = 2_000_000


def filler(tokens: int) -> str:
    """A stand-in for a system prompt and tool definitions that were not recorded, of about
    `tokens` cl100k tokens (only its size matters to the bill), at most `MAX_STAND_IN`."""
    tokens = min(tokens, MAX_STAND_IN)
    if tokens <= 0:
        return ""
    tok = get_tokenizer()
    unit = SYSTEM + "\n"
    n = max(1, tokens // max(1, tok.count(unit)))
    return unit * n


def marked(item: dict[str, Any]) -> dict[str, Any]:
    """An Anthropic message with Claude Code's breakpoint on its last block."""
    content = item["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    return {**item, "content": [*blocks[:-1], {**blocks[-1], "cache_control": EPHEMERAL}]}


class Requests:
    """A session's requests in order: after `to(k)`, `head` (what request k carries beside its
    list: the model, the system prompt, the tools), `key` (the list's field: "messages", or
    "input" for the Responses API) and `items`, the list as sent."""

    def __init__(self, session: Session, api: str, model: str) -> None:
        self.session, self.api, self.model = session, api, model
        native = session.native
        self.key = "input" if native is not None and native.api == "responses" else "messages"
        self.mark = (native.api if native is not None else api) == "anthropic"  # its newest block
        self.head: dict[str, Any] = {}
        self.items: list[Any] = []
        self._n = 0  # the session's entries the items hold
        self._tail: Any = None  # the last item as it is before its mark
        self._system: list[str] = []  # the system messages so far (messages sent to Anthropic)
        self._task = False  # the items are TASK's stand-in
        self._filler = {"role": "system", "content": filler(session.system_tokens)}  # Chat: none recorded
        self.k = -1

    def body(self) -> dict[str, Any]:
        """Request k whole, as its client sent it."""
        return {**self.head, self.key: list(self.items)}

    def to(self, k: int) -> int | None:
        """Request k, built from the request before it: the index of its first item that differs
        from that request's, or None when it is not that request grown (the first, or one whose
        head changed): then it was built whole."""
        n = self.session.calls[k]
        if k != self.k + 1 or n < self._n:
            self.k, self._n, self.items, self._tail, self._system, self.head = -1, 0, [], None, [], {}
        grown, self.k = self.k >= 0, k
        head, first = self.head, max(0, len(self.items) - 1)
        if self._tail is not None:
            self.items[-1] = self._tail
        new = self._add(n)
        self._n = n
        if self.mark and self.items:
            self._tail = self.items[-1]
            self.items[-1] = marked(self._tail)
        return first if grown and self.head is head and not new else None

    def _add(self, n: int) -> bool:
        """The session's entries up to `n` in the items, the head made for them; whether the
        items' front changed (they were made anew)."""
        native = self.session.native
        if native is not None:
            self.head = self.head or _native_head(self.session)
            self.items.extend(native.items[self._n : n])
            return False
        if self.api == "anthropic":
            return self._anthropic(n)
        new = self.session.messages[self._n : n]
        self.head = self.head or {"model": self.model}
        filled = bool(self.items) and self.items[0] is self._filler
        if not self.items and self.session.system_tokens:
            self.items.append(self._filler)  # taken out again when a system message comes
        if any(m.get("role") == "system" for m in new) and self.items and self.items[0] is self._filler:
            del self.items[0]
            self.items.extend(new)
            return filled
        self.items.extend(new)
        return False

    def _anthropic(self, n: int) -> bool:
        """Messages as an Anthropic client sends them: system messages in `system`, the rest as
        Anthropic messages, a role's consecutive ones merged, starting with the user's."""
        anew = self._task
        if anew:
            self.items, self._task = [], False
        system = len(self._system)
        for m in self.session.messages[self._n : n]:
            if m.get("role") == "system":
                self._system.append(str(m.get("content")))
                continue
            message = _anthropic_message(to_turn(m))
            if not self.items and message["role"] != "user":
                self.items.append({"role": "user", "content": [{"type": "text", "text": SO_FAR}]})
            merge_into(self.items, message)
        if not self.items:
            self.items, self._task = [{"role": "user", "content": [{"type": "text", "text": TASK}]}], True
        if not self.head or len(self._system) != system:
            front = self.session.front
            text = "\n\n".join(self._system) or ("" if front else filler(self.session.system_tokens))
            self.head = {"model": self.model, "max_tokens": 32000}
            if front:  # a real client's, as it sent them, before the session's own
                self.head.update({k: front[k] for k in ("system", "tools") if k in front})
            if text:
                self.head["system"] = [*self.head.get("system", []), {"type": "text", "text": text,
                                                                       "cache_control": EPHEMERAL}]
        return anew


def _native_head(session: Session) -> dict[str, Any]:
    """What a client's own request carries beside its items: its recorded system prompt and tools
    (where the file has none, a stand-in of the size the first call's usage leaves for them)."""
    native = session.native
    assert native is not None
    head = dict(native.head)
    if "tools" not in head and session.system_tokens:
        stand_in = filler(session.system_tokens)
        head["tools"] = [{"name": "unrecorded", "description": stand_in, "input_schema": {"type": "object"}}
                         if native.api == "anthropic" else
                         {"type": "function", "name": "unrecorded", "description": stand_in}]
    if native.api == "responses":
        return {**head, "stream": True}
    system = head.pop("system", None)
    head["max_tokens"] = 32000
    if system:
        head["system"] = [*system[:-1], {**system[-1], "cache_control": EPHEMERAL}]
    return head


def client_body(session: Session, k: int, api: str, model: str) -> dict[str, Any]:
    """Request k whole, as the session's client sent it (its own requests where its file holds
    them, else the messages as an Anthropic (`api` "anthropic") or an OpenAI Chat client sends them)."""
    requests = Requests(session, api, model)
    requests.to(k)
    return requests.body()
