"""Recorded sessions, read as `optictx bill` replays them: a JSONL of OpenAI-style messages with,
beside it, a `.usage.json` sidecar of what the provider reported per call; or an agent's own
session file, with the usage the provider reported for every call (the "billed" column beside
the replay's model):

- Claude Code's transcript: one JSONL per session under `~/.claude/projects/<project>/`, a record
  per event; `user` and `assistant` records carry the API messages (an assistant message
  streamed in parts is several records with one id, its usage on each), newer versions also the
  request's system prompt and tools (`api-request-shape`) and the messages sent beside the
  person's (`api-request-blob`, each stored once and named by hash in every `api-request` that
  sends it: system messages inside `messages`, the first message as sent).
  Sub-agents' records (`isSidechain`) are other conversations and are left out.
- Codex's rollout: JSONL under `~/.codex/sessions/YYYY/MM/DD/`; `response_item` records are the
  Responses API's input items, `token_usage_record` the usage of each response, `session_meta`
  the base instructions (sent as the first developer message; the CLI may send a variant of them
  for its model, and its tools are not kept: a stand-in of the size the first call's usage
  leaves for them is priced instead).

Files are read line by line with a bound on a line's length (`io.lines`); every field used is
checked where it is read, and a bad one is a ConversationFileError naming the file, the line and
the field.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import ConversationFileError
from ..io import lines, read_jsonl
from ..tokens import get_tokenizer

log = logging.getLogger("optictx.bill")

MAX_COUNT = 10**9  # tokens one call can report; more is a damaged file
Api = Literal["anthropic", "responses"]


@dataclass(frozen=True)
class Native:
    """A client's own requests: what every request carries beside its messages (`head`: model,
    system prompt, tools), and the messages or input items in order; request k carries
    `items[:calls[k]]` (`Session.calls`)."""

    api: Api
    head: dict[str, Any]
    items: list[dict[str, Any]] = field(repr=False)
    via: str = ""  # where the client says it sent them (Codex's `model_provider`)

    @property
    def model(self) -> str:
        return str(self.head.get("model") or "")


def records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """The file's JSON objects, one per line, with their line numbers (`io.lines`: bounded)."""
    for n, line in lines(path):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise ConversationFileError(f"{path}, line {n}: not JSON ({str(exc)[:80]})") from exc
        if not isinstance(record, dict):
            raise ConversationFileError(f"{path}, line {n}: a record is a JSON object")
        yield n, record


def kind_of(path: Path) -> Literal["claude-code", "codex", "messages"]:
    """Whose file this is, from its first record: Claude Code's transcript, Codex's rollout, or
    OpenAI-style messages (anything else)."""
    for _, record in records(path):
        if record.get("type") == "session_meta" or "payload" in record:
            return "codex"
        if "sessionId" in record or "parentUuid" in record:
            return "claude-code"
        return "messages"
    return "messages"


class _Where:
    """Checks fields of one record, naming the file, the line and the field when one is wrong."""

    def __init__(self, path: Path, line: int) -> None:
        self.path, self.line = path, line

    def fail(self, name: str, what: str) -> ConversationFileError:
        return ConversationFileError(f"{self.path}, line {self.line}: {name}: {what}")

    def obj(self, value: Any, name: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(name, "an object is expected")
        return value

    def count(self, value: Any, name: str, *, optional: bool = True) -> int:
        """A token count: a whole number from 0 to MAX_COUNT (a bool is not one)."""
        if value is None and optional:
            return 0
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
            raise self.fail(name, f"a whole number of tokens from 0 to {MAX_COUNT} is expected")
        return value

    def blocks(self, value: Any, name: str) -> list[dict[str, Any]]:
        """A request's system blocks or tools: a list of objects (`[5, null]` is no system prompt)."""
        if not isinstance(value, list) or not all(isinstance(b, dict) for b in value):
            raise self.fail(name, "a list of objects is expected")
        if name.endswith("system") and not all(isinstance(b.get("text", ""), str) for b in value):
            raise self.fail(name, "each system block's text is a string")
        return value

    def message(self, value: Any, name: str) -> dict[str, Any]:
        """An API message: a role and a content of text or a list of blocks (objects with a type)."""
        m = self.obj(value, name)
        if m.get("role") not in ("user", "assistant", "system"):
            raise self.fail(f"{name}.role", "user, assistant or system is expected")
        content = m.get("content")
        if not isinstance(content, str) and not (isinstance(content, list) and all(
                isinstance(b, dict) and isinstance(b.get("type"), str) for b in content)):
            raise self.fail(f"{name}.content", "text or a list of blocks with a type is expected")
        return {"role": m["role"], "content": content}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))


# One call's prompt tokens, as the provider reported them: "prompt", "read", "written", "fresh",
# and (Claude Code's transcripts) "written_1h", the writes asked to live an hour.
Usage = dict[str, int]


def claude_code(path: Path) -> tuple[Native, list[int], list[Usage]]:
    """A Claude Code transcript as its requests (module docstring)."""
    items: list[dict[str, Any]] = []
    calls: list[int] = []
    billed: list[Usage] = []
    head: dict[str, Any] = {}
    blobs: dict[str, dict[str, Any]] = {}
    last_id: Any = None
    for n, record in records(path):
        at = _Where(path, n)
        kind = record.get("type")
        if record.get("isSidechain") is True:
            continue
        if kind == "api-request-shape" and not head:
            shape = at.obj(record.get("shape"), "shape")
            head = {k: at.blocks(shape[k], f"shape.{k}") for k in ("system", "tools") if shape.get(k) is not None}
        elif kind == "api-request-blob" and record.get("message") is not None:
            blobs[str(record.get("hash"))] = at.message(record["message"], "message")  # stored once, sent often
        elif kind == "api-request" and isinstance(record.get("tail"), list):
            for m in (blobs[h] for h in record["tail"] if isinstance(h, str) and h in blobs):
                if m["role"] == "system":  # a system message the client put after the messages so far
                    items.append(m)
                elif m["role"] == "user" and items and items[-1]["role"] == "user" and \
                        _text(items[-1]["content"]) in _text(m["content"]):
                    items[-1] = m  # the person's message as it was sent, with what the client put beside it
        elif kind in ("user", "assistant"):
            m = at.message(record.get("message"), "message")
            if kind == "assistant":
                msg = record["message"]
                usage = at.obj(msg.get("usage"), "message.usage")
                if msg.get("id") is None or msg.get("id") != last_id:  # a new call
                    calls.append(len(items))
                    read, written = (at.count(usage.get(k), f"message.usage.{k}")
                                     for k in ("cache_read_input_tokens", "cache_creation_input_tokens"))
                    fresh = at.count(usage.get("input_tokens"), "message.usage.input_tokens")
                    split = usage.get("cache_creation")  # the writes by lifetime, where recorded
                    hour = min(written, at.count(split.get("ephemeral_1h_input_tokens"),
                                                 "message.usage.cache_creation.ephemeral_1h_input_tokens")
                               ) if isinstance(split, dict) else 0
                    billed.append({"prompt": fresh + read + written, "read": read, "written": written, "fresh": fresh,
                                   "written_1h": hour})
                    if isinstance(msg.get("model"), str):
                        head.setdefault("model", msg["model"])
                    last_id = msg.get("id")
                    items.append(m)
                    continue
            if items and items[-1]["role"] == m["role"] != "system":  # one API message, recorded in parts
                items[-1] = {**items[-1], "content": [*_blocks(items[-1]["content"]), *_blocks(m["content"])]}
            else:
                items.append(m)
    if not calls:
        raise ConversationFileError(f"{path}: no assistant message: no call to replay")
    return Native("anthropic", head, items), calls, billed


def _blocks(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


# Codex's rollout keeps fields of its own beside an item's API fields: they are not sent.
_ROLLOUT_ONLY = ("internal_chat_message_metadata_passthrough", "metadata")


def _sent_first(item: dict[str, Any]) -> bool:
    """Whether a Responses item is one a client sends (a message of the client's roles, a tool's
    output), not one the model answered with (reasoning, calls, its own messages)."""
    kind = item.get("type", "message")
    return (kind == "message" and item.get("role") in ("user", "developer", "system")) or \
        str(kind).endswith("_output")


def codex_rollout(path: Path) -> tuple[Native, list[int], list[Usage]]:
    """A Codex rollout as its requests (module docstring)."""
    items: list[dict[str, Any]] = []
    calls: list[int] = []
    billed: list[Usage] = []
    head: dict[str, Any] = {}
    via = via_default = ""
    answering = False  # the model's items of one response are coming in
    for n, record in records(path):
        at = _Where(path, n)
        kind, payload = record.get("type"), record.get("payload")
        if kind == "session_meta":
            via = payload.get("model_provider") if isinstance(payload, dict) else None
            via = via if isinstance(via, str) else via_default
            base = at.obj(payload, "payload").get("base_instructions")
            text = base.get("text") if isinstance(base, dict) else base
            if isinstance(text, str) and not items:
                items.append({"type": "message", "role": "developer",
                              "content": [{"type": "input_text", "text": text}]})
        elif kind == "turn_context" and isinstance(payload, dict) and isinstance(payload.get("model"), str):
            head.setdefault("model", payload["model"])
        elif kind == "response_item":
            item = {k: v for k, v in at.obj(payload, "payload").items() if k not in _ROLLOUT_ONLY}
            if not isinstance(item.get("type", "message"), str):
                raise at.fail("payload.type", "a string is expected")
            if not _sent_first(item) and not answering:
                calls.append(len(items))
                answering = True
            items.append(item)
        elif kind == "token_usage_record":
            usage = at.obj(at.obj(payload, "payload").get("usage"), "payload.usage")
            prompt = at.count(usage.get("input_tokens"), "payload.usage.input_tokens")
            read = at.count(usage.get("cached_input_tokens"), "payload.usage.cached_input_tokens")
            if read > prompt:
                raise at.fail("payload.usage.cached_input_tokens", "more than the prompt's input_tokens")
            if not answering:  # a response with no item of its own (an empty answer)
                calls.append(len(items))
            billed.append({"prompt": prompt, "read": read, "written": 0, "fresh": prompt - read})
            answering = False
    if not calls:
        raise ConversationFileError(f"{path}: no response recorded: no call to replay")
    calls = calls[: len(billed)] if len(billed) < len(calls) else calls  # a call cut off before its usage
    return Native("responses", head, items, via[:64]), calls, billed[: len(calls)]


@dataclass(frozen=True)
class Session:
    name: str
    messages: list[dict[str, Any]]
    calls: list[int]  # request k carries messages[:calls[k]] (or the native requests' items[:calls[k]])
    system_tokens: int  # the client's system prompt and tools, as billed, where the file lacks them (0: unknown)
    billed: list[Usage] = field(default_factory=list)  # what the provider reported per call
    native: Native | None = None  # a client's own session file: its requests as it sent them
    # A real client's `system` and `tools` (a request body it sent) in place of the stand-in for
    # those not recorded (`system_tokens`): the bill under what the client really sends.
    front: dict[str, Any] | None = None

    @property
    def provider(self) -> str:
        """Whose cache rules price it by default, and whose usage `billed` is: the client's provider."""
        return "openai:gpt-5" if self.native is not None and self.native.api == "responses" else "anthropic"


def load_session(path: str | Path) -> Session:
    """A session file: Claude Code's transcript, Codex's rollout, or a JSONL of messages with,
    beside it, its `.usage.json` sidecar when there is one."""
    path = Path(path)
    kind = kind_of(path)
    if kind != "messages":
        native, calls, billed = claude_code(path) if kind == "claude-code" else codex_rollout(path)
        unrecorded = 0
        if "tools" not in native.head:  # the first call's prompt, less what the file shows of it
            shown = json.dumps([native.head.get("system"), native.items[: calls[0]]], ensure_ascii=False)
            unrecorded = max(0, billed[0]["prompt"] - get_tokenizer().count(shown)) if billed else 0
        return Session(path.stem, [], calls, unrecorded, billed, native)
    messages = [t.to_openai() for t in read_jsonl(path)]
    sidecar = path.with_name(path.name.removesuffix(".jsonl") + ".usage.json")
    if sidecar.exists():
        calls, billed = usage_sidecar(sidecar, len(messages))
        return Session(path.stem, messages, calls, billed[0]["prompt"] - billed[0]["fresh"], billed)
    # A call before each assistant turn that follows the client's (two assistant messages in a
    # row are one answer streamed in parts: the API merges them into one message).
    calls = [i for i, m in enumerate(messages)
             if m.get("role") == "assistant" and (i == 0 or messages[i - 1].get("role") != "assistant")]
    return Session(path.stem, messages, calls, 0)


def usage_sidecar(path: Path, messages: int) -> tuple[list[int], list[Usage]]:
    """A `.usage.json` sidecar: {"calls": [{"message": i, "input_tokens": n,
    "cache_read_input_tokens": n, "cache_creation_input_tokens": n, ...}, ...]}, what Anthropic
    reported for the call made before message i; every field checked (the error names it)."""
    raw = b"".join(line for _, line in lines(path))
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ConversationFileError(f"{path}: not JSON ({str(exc)[:80]})") from exc
    at = _Where(path, 1)
    calls = at.obj(body, "the file").get("calls")
    if not isinstance(calls, list) or not calls:
        raise at.fail("calls", "a non-empty list of calls is expected")
    out, billed, last = [], [], 0
    for n, call in enumerate(calls):
        call = at.obj(call, f"calls[{n}]")
        message = at.count(call.get("message"), f"calls[{n}].message", optional=False)
        if not last <= message < messages:
            raise at.fail(f"calls[{n}].message", f"a message index from {last} to {messages - 1} is expected")
        fresh, read, written = (at.count(call.get(k), f"calls[{n}].{k}", optional=False) for k in
                                ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
        out.append(message)
        billed.append({"prompt": fresh + read + written, "read": read, "written": written, "fresh": fresh})
        last = message
    return out, billed


def session_files(path: str | Path, since: float | None = None) -> list[Path]:
    """The session files at `path`: a file itself; a folder walked through (a client's whole
    store: `~/.claude/projects`, `~/.codex/sessions`), newest first, those last written before
    `since` (seconds since the epoch) left out."""
    p = Path(path).expanduser()
    if not p.is_dir():
        return [p]
    found = [(f.stat().st_mtime, f) for f in p.rglob("*.jsonl") if f.is_file()]
    kept = sorted(((t, f) for t, f in found if since is None or t >= since), reverse=True)
    if not kept:
        raise ConversationFileError(f"{p}: no .jsonl sessions there" + (" since then" if found else ""))
    return [f for _, f in kept]


def sessions(paths: Iterable[str | Path], since: float | None = None) -> Iterator[Session]:
    """The sessions at `paths` (`session_files`). A file named is read or fails; in a folder a
    file that is no session (another tool's log, a damaged transcript) is skipped, and said in
    the log."""
    for path in paths:
        files = session_files(path, since)
        walked = Path(path).expanduser().is_dir()
        for f in files:
            try:
                yield load_session(f)
            except ConversationFileError as exc:
                if not walked:
                    raise
                log.warning("skipped %s: %s", f, exc)
