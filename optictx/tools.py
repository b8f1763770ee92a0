"""`search` and `recall` as tools a model calls: one definition each (`SPECS`), written out in the
shape of OpenAI Chat, OpenAI Responses and Anthropic Messages, and `Tools.run`, which answers a
call from any of the three in the shape it came in. The proxy's MCP server serves the same specs.

    tools = mem.tools()
    reply = client.messages.create(..., tools=tools.anthropic())
    results = [tools.run(b) for b in reply.content if b.type == "tool_use"]
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .errors import OptictxError

ABOUT = ("Earlier turns of this conversation are shown as page images, each after a label "
         "'[page <handle>: turns #a-#b]'. The pages may be misread; these tools return the exact stored words.")


@dataclass(frozen=True)
class Spec:
    name: str
    description: str
    properties: dict[str, dict[str, Any]]
    required: tuple[str, ...]

    def schema(self) -> dict[str, Any]:
        return {"type": "object", "properties": self.properties, "required": list(self.required),
                "additionalProperties": False}


SPECS = (
    Spec("search", f"{ABOUT} Find the turns that hold a string: words, or an exact id, hash, path or "
         "\"quoted phrase\" (any case; every term must be found). Gives each turn's page handle, number and role, "
         "and the lines that hold it, whole, with a line either side, newest first: usually the answer itself.",
         {"query": {"type": "string", "description": "words or exact strings; \"quote\" a phrase"},
          "within": {"type": "string", "description": "a page handle: search only that page's conversation"},
          "limit": {"type": "integer", "description": "at most this many turns (default 10, at most 50)"}},
         ("query",)),
    Spec("recall", f"{ABOUT} Give the exact turns a page holds, as they were sent: messages, tool calls and "
         "tool results, word for word. Use it before relying on a detail read from a page.",
         {"page": {"type": "string", "description": "the page's handle, from its label"},
          "turns": {"type": "string", "description": "only these turns of the page, e.g. '41-45' or '41'"},
          "lines": {"type": "string", "description": "with one turn, only these of its lines, e.g. '3-9' (the "
                    "numbers a search shows)"},
          "grep": {"type": "string", "description": "only the lines holding this string (any case), with context"},
          "offset": {"type": "integer", "description": "go on from this character, as a cut recall says"}},
         ("page",)),
)


class Answers(Protocol):
    """What answers the tools: a Memory, or the proxy's view of a tenant's conversations."""

    def recall(self, page: str, **asked: Any) -> Any: ...

    def search(self, query: str, **asked: Any) -> Any: ...


def answer(target: Answers, name: str, arguments: Mapping[str, Any]) -> tuple[str, bool]:
    """(text, is_error) of tool `name` called with `arguments` on `target`; never raises on a
    model's mistake (an unknown tool, a bad argument, an unknown page): it says what was wrong."""
    spec = next((s for s in SPECS if s.name == name), None)
    if spec is None:
        return f"error: no tool {name!r} here (these are {', '.join(s.name for s in SPECS)})", True
    if not isinstance(arguments, Mapping):
        return "error: the arguments must be a JSON object", True
    unknown = sorted(set(arguments) - set(spec.properties))
    missing = [r for r in spec.required if arguments.get(r) in (None, "")]
    if unknown or missing:
        what = (f"unknown argument(s) {', '.join(unknown)}" if unknown else "") + \
            ("; " if unknown and missing else "") + (f"missing {', '.join(missing)}" if missing else "")
        return f"error: {name}: {what}", True
    args = dict(arguments)
    first = args.pop(spec.required[0])
    try:
        result = getattr(target, name)(first, **args)
    except OptictxError as exc:
        return f"error: {exc}", True
    return result.text, False


def _given(**arguments: Any) -> dict[str, Any]:
    return {k: v for k, v in arguments.items() if v is not None}


def _arguments(raw: Any) -> Mapping[str, Any] | str:
    if isinstance(raw, Mapping):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return "not JSON"
    return value if isinstance(value, Mapping) else "not an object"


class Tools:
    """The tools over one target: definitions per API, and `run`."""

    def __init__(self, target: Answers) -> None:
        self.target = target

    def openai(self) -> list[dict[str, Any]]:
        """For `chat.completions.create(tools=...)`."""
        return [{"type": "function", "function": {"name": s.name, "description": s.description,
                                                  "parameters": s.schema()}} for s in SPECS]

    def responses(self) -> list[dict[str, Any]]:
        """For `responses.create(tools=...)`."""
        return [{"type": "function", "name": s.name, "description": s.description, "parameters": s.schema()}
                for s in SPECS]

    def anthropic(self) -> list[dict[str, Any]]:
        """For `messages.create(tools=...)`."""
        return [{"name": s.name, "description": s.description, "input_schema": s.schema()} for s in SPECS]

    def run(self, call: Any) -> dict[str, Any]:
        """The result of one tool call, in its API's shape: a Chat `tool_calls` entry gives a
        `tool` message, a Responses `function_call` item a `function_call_output`, an Anthropic
        `tool_use` block a `tool_result` block. SDK objects are taken as their dicts. A call in
        no known shape is an OptictxError."""
        c = call.model_dump() if hasattr(call, "model_dump") else call
        if not isinstance(c, Mapping):
            raise OptictxError(f"a tool call: a dict or an SDK object, not {type(call).__name__}")
        if c.get("type") == "tool_use":
            text, error = self._answer(c.get("name"), c.get("input"))
            return {"type": "tool_result", "tool_use_id": c.get("id"), "content": text, **({"is_error": True}
                                                                                          if error else {})}
        if c.get("type") == "function_call":
            text, _ = self._answer(c.get("name"), _arguments(c.get("arguments")))
            return {"type": "function_call_output", "call_id": c.get("call_id"), "output": text}
        if isinstance(c.get("function"), Mapping):
            f = c["function"]
            text, _ = self._answer(f.get("name"), _arguments(f.get("arguments")))
            return {"role": "tool", "tool_call_id": c.get("id"), "content": text}
        raise OptictxError("a tool call: an OpenAI tool_calls entry, a Responses function_call item or an "
                           "Anthropic tool_use block")

    def functions(self) -> list[Callable[..., str]]:
        """`search` and `recall` as plain Python functions with typed parameters and the specs'
        descriptions, for frameworks that make tools of functions (the LangChain and LlamaIndex
        adapters): each returns the text a model reads, a mistake said in it ("error: ...")."""
        target = self.target

        def search(query: str, within: str | None = None, limit: int | None = None) -> str:
            return answer(target, "search", _given(query=query, within=within, limit=limit))[0]

        def recall(page: str, turns: str | None = None, lines: str | None = None, grep: str | None = None,
                   offset: int | None = None) -> str:
            return answer(target, "recall", _given(page=page, turns=turns, lines=lines, grep=grep, offset=offset))[0]

        for fn, spec in zip((search, recall), SPECS):
            fn.__doc__ = spec.description
        return [search, recall]

    def _answer(self, name: Any, arguments: Mapping[str, Any] | str) -> tuple[str, bool]:
        if isinstance(arguments, str):
            return f"error: the arguments are {arguments}; send a JSON object", True
        return answer(self.target, str(name), arguments)
