"""`optictx serve --image-instructions` (off by default): what a request carries before its
conversation, its system prompt's prose and its tools' descriptions, drawn on pages
(`optictx.instructions`) that open its first user message, in the body that goes upstream.

A client sends these on every call, and they are its contract with the model, so they stay text
unless asked: the tools' names and JSON schemas stay as the client sent them (the API needs
them), each long description becomes a line naming its section on the pages, short system
blocks (an identity line, a billing header) stay text, and the pages are drawn sharper than
history. The memory keeps the request's own turns, so a client that changes its tools (Claude
Code's ToolSearch loading a deferred one) changes the pages, not the conversation. Only where
the pages and the lines put in cost less than the text taken out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..cost import get_cost_model
from ..export import MARK, PAGE_PARTS
from ..instructions import Drawn, draw
from ..native import IMAGE_PARTS, images_cost
from ..tokens import get_tokenizer
from ..tools import ABOUT
from .anthropic_api import MAX_BREAKPOINTS, marks

# Pages of instructions in one request at most, for a consumer that caps a request's images: a
# memory leaves room for them under the cap (`Proxy.memory`); instructions that need more stay text.
MAX_PAGES = 8
MIN_SYSTEM = 1000  # characters: a shorter system block or message stays text
MIN_DESCRIPTION = 400  # characters: a shorter description stays (the line that replaces it is ~20 tokens)
TITLE = "INSTRUCTIONS"
POINTER = ("[optictx, this user's local proxy, drew the rest of these instructions and the full "
           "description of every tool on the images that open the conversation, to save tokens: read "
           "them as you would read this text.]")
MORE = "[More of these instructions, on the images after the above.]"
HEAD = "[The {n} images below hold this session's instructions and tool descriptions; the conversation follows them.]"
STUB = 'Described in full under "TOOL {name}" on the images that open the conversation.'


@dataclass(frozen=True)
class _Api:
    """What differs between the APIs here: the list's field, a text part's type, the field that
    holds a system prompt beside the list, a client tool's shape (`tool`: its own type, where it
    may have none; `nested`: its name and description inside `function`), a page's part, and
    whether the cache reads a prefix only up to a block the request marks (`marked`)."""

    key: str
    text: str
    system: str | None
    tool: str
    nested: bool
    page: Callable[[str, str | None], dict[str, Any]]
    marked: bool = False


_APIS = {"anthropic": _Api("messages", "text", "system", "custom", False, PAGE_PARTS["anthropic"], True),
         "openai": _Api("messages", "text", None, "function", True, PAGE_PARTS["openai"]),
         "responses": _Api("input", "input_text", "instructions", "function", False, PAGE_PARTS["responses"])}


@dataclass
class Instructions:
    """Instructions moved onto pages, for requests of one API (`api`: "anthropic", "openai" for
    Chat Completions, "responses") sent to one consumer (`vision`). Called on a body that goes
    upstream, it gives the body rewritten, or the same body where nothing pays; `moved` is then
    how many tokens fewer the body counts (the text taken out, less the lines and images put
    in), `drawn` the pages. `room`: the conversation leaves room for MAX_PAGES under the
    consumer's image cap (a memory the proxy made with the option), so its images need no count."""

    api: str
    vision: str
    room: bool = False
    moved: int = 0
    drawn: Drawn | None = None  # the pages it put in, once it did

    @property
    def pages(self) -> int:
        return len(self.drawn.images) if self.drawn is not None else 0

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        api = _APIS[self.api]
        items = body.get(api.key)
        user = next((i for i, m in enumerate(items) if isinstance(m, dict) and m.get("role") == "user"), None) \
            if isinstance(items, list) else None
        if user is None:
            return body
        head = {k: v for k, v in body.items() if k != api.key}
        front = list(items[:user])
        texts = _system(api, head, front)
        sections = [(TITLE, "\n\n".join(texts))] if texts else []
        if isinstance(head.get("tools"), list):
            head["tools"] = [_tool(api, t, sections) for t in head["tools"]]
        weighed = _weighed(tuple(sections), len(texts), self.vision) if sections else None
        cap = get_cost_model(self.vision).max_images
        if weighed is None or (not self.room and cap is not None and len(weighed[0].images) + _images(items) > cap):
            return body
        self.drawn, self.moved = weighed
        mark = api.marked and marks({**head, api.key: items}) < MAX_BREAKPOINTS
        return {**head, api.key: [*front, self._opened(api, items[user], self.drawn, mark), *items[user + 1 :]]}

    def _opened(self, api: _Api, message: dict[str, Any], drawn: Drawn, mark: bool) -> dict[str, Any]:
        """The first user message with the pages before what it says, the last page marked for
        the cache where `mark` (`export.MARK`, so that a proxy counts it as its own): a compaction
        changes what follows the pages, and without a breakpoint there the provider would read
        the request only up to the system prompt and write the pages again."""
        content = message.get("content")
        parts = [{"type": api.text, "text": content}] if isinstance(content, str) else list(content or [])
        detail = get_cost_model(self.vision).image_detail
        pages = [api.page(data, detail) for data in drawn.images]
        if mark:
            pages[-1] = {**pages[-1], "cache_control": MARK}
        return {**message, "content": [{"type": api.text, "text": HEAD.format(n=len(pages))}, *pages, *parts]}


def _system(api: _Api, head: dict[str, Any], front: list[Any]) -> list[str]:
    """The system prompt's long texts taken out, each replaced by a line (POINTER, then MORE):
    in its field beside the list (Anthropic's `system` blocks, the Responses API's
    `instructions`), and in the system and developer messages before the first user message
    (`front`, rewritten in place: Codex sends its instructions so), other parts and fields as they came."""
    texts: list[str] = []
    if api.system is not None and isinstance(head.get(api.system), (str, list)):
        head[api.system] = _texts(head[api.system], api.text, texts)
    for i, m in enumerate(front):
        if isinstance(m, dict) and m.get("role") in ("system", "developer") and "content" in m:
            front[i] = {**m, "content": _texts(m["content"], api.text, texts)}
    return texts


def _tool(api: _Api, tool: Any, sections: list[tuple[str, str]], space: str = "") -> Any:
    """`tool` with its long description replaced by STUB, the description noted in `sections`;
    as it came where it is not a client's own tool (a server tool of Anthropic's, a web search),
    Anthropic defers it, or it is this proxy's own (`tools.ABOUT`). A Responses namespace
    (Codex's MCP servers, its agents) is the same for each tool in it."""
    if not isinstance(tool, dict):
        return tool
    if tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
        name = f"{tool.get('name')}." if isinstance(tool.get("name"), str) else ""
        return {**tool, "tools": [_tool(api, t, sections, name) for t in tool["tools"]]}
    ours = tool.get("type", None if api.nested else api.tool) == api.tool and tool.get("defer_loading") is not True
    spec = tool.get("function") if api.nested else tool
    spec = spec if isinstance(spec, dict) else {}
    text, name = spec.get("description"), spec.get("name")
    if not (ours and isinstance(text, str) and isinstance(name, str)) or \
            len(text) < MIN_DESCRIPTION or text.startswith(ABOUT):
        return tool
    sections.append((f"TOOL {space}{name}", text))
    stubbed = {**spec, "description": STUB.format(name=space + name)}
    return {**tool, "function": stubbed} if api.nested else stubbed


@lru_cache(maxsize=64)  # a client sends the same instructions on every call
def _weighed(sections: tuple[tuple[str, str], ...], texts: int, vision: str) -> tuple[Drawn, int] | None:
    """The pages for `sections` (`texts` of them the system prompt's) and how many tokens fewer a
    request counts with them in place of the text (the lines put in and the images counted), or
    None where that is not fewer, or the pages are more than a consumer with an image cap takes."""
    tok, cost = get_tokenizer(), get_cost_model(vision)
    drawn = draw(sections, vision)
    taken = sum(tok.count(text) for _, text in sections)
    put = tok.count(HEAD.format(n=len(drawn.images))) + sum(
        tok.count(STUB.format(name=title[5:])) for title, _ in sections if title != TITLE) + \
        (tok.count(POINTER) + tok.count(MORE) * (texts - 1) if texts else 0)
    moved = taken - put - images_cost(drawn.sizes, cost)
    if moved <= 0 or (cost.max_images is not None and len(drawn.images) > MAX_PAGES):  # never worse than text
        return None
    return drawn, moved


def _images(items: list[Any]) -> int:
    """The images in a request's messages or items, tool results' included."""
    count, stack = 0, list(items)
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            count += value.get("type") in IMAGE_PARTS
            stack.extend(v for k, v in value.items() if k in ("content", "output") and isinstance(v, list))
        elif isinstance(value, list):
            stack.extend(value)
    return count


def _texts(content: Any, kind: str, texts: list[str]) -> Any:
    """`content` (a string, or a list of parts) with each long text in it replaced by POINTER
    (the first of all) or MORE, the texts noted in `texts`; anything else as it came."""
    if isinstance(content, str):
        if len(content) < MIN_SYSTEM:
            return content
        texts.append(content)
        return POINTER if len(texts) == 1 else MORE
    if not isinstance(content, list):
        return content
    out = []
    for part in content:
        if isinstance(part, dict) and part.get("type") in ("text", kind) and isinstance(part.get("text"), str) \
                and len(part["text"]) >= MIN_SYSTEM:
            texts.append(part["text"])
            part = {**part, "text": POINTER if len(texts) == 1 else MORE}
        out.append(part)
    return out
