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

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ..cost import get_cost_model
from ..instructions import MEDIA_TYPE, Drawn, draw
from ..native import images_cost
from ..tokens import get_tokenizer
from ..tools import ABOUT

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


@dataclass
class Instructions:
    """Instructions moved onto pages, for requests of one API (`api`: "anthropic", "openai" for
    Chat Completions, "responses") sent to one consumer (`vision`). Called on a body that goes
    upstream, it gives the body rewritten, or the same body where nothing pays; `moved` is then
    how many tokens fewer the body counts (the text taken out, less the lines and images put
    in), `drawn` the pages."""

    api: str
    vision: str
    moved: int = 0
    drawn: Drawn | None = None  # the pages it put in, once it did

    @property
    def pages(self) -> int:
        return len(self.drawn.images) if self.drawn is not None else 0

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        key = "input" if self.api == "responses" else "messages"
        items = body.get(key)
        user = next((i for i, m in enumerate(items) if isinstance(m, dict) and m.get("role") == "user"), None) \
            if isinstance(items, list) else None
        if user is None:
            return body
        head = {k: v for k, v in body.items() if k != key}
        front = list(items[:user])
        texts = self._system(head, front)
        sections = [(TITLE, "\n\n".join(texts))] if texts else []
        tools = head.get("tools")
        if isinstance(tools, list):
            head["tools"] = [self._tool(t, sections) for t in tools]
        if not sections:
            return body
        weighed = _weighed(tuple(sections), len(texts), self.vision)
        cap = get_cost_model(self.vision).max_images
        if weighed is None or (cap is not None and len(weighed[0].images) + _images(items) > cap):
            return body  # (a memory made before the option leaves no room for them under the cap)
        self.drawn, self.moved = weighed
        return {**head, key: [*front, self._opened(items[user], self.drawn), *items[user + 1 :]]}

    def _system(self, head: dict[str, Any], front: list[Any]) -> list[str]:
        """The system prompt's long texts taken out, each replaced by a line
        (POINTER, then MORE): Anthropic's `system` blocks, the Responses API's `instructions`, and
        the system and developer messages before the first user message (`front`, rewritten in
        place: Codex sends its instructions so), their other parts and fields as they came."""
        texts: list[str] = []
        if self.api == "anthropic" and isinstance(head.get("system"), (str, list)):
            head["system"] = _texts(head["system"], "text", texts)
        if self.api == "responses" and isinstance(head.get("instructions"), str):
            head["instructions"] = _texts(head["instructions"], "input_text", texts)
        kind = "input_text" if self.api == "responses" else "text"
        for i, m in enumerate(front):
            if isinstance(m, dict) and m.get("role") in ("system", "developer") and "content" in m:
                front[i] = {**m, "content": _texts(m["content"], kind, texts)}
        return texts

    def _tool(self, tool: Any, sections: list[tuple[str, str]], space: str = "") -> Any:
        """`tool` with its long description replaced by STUB, the description noted in `sections`;
        as it came where its shape has no description of its own to replace (a server tool of
        Anthropic's, a deferred one) or it is this proxy's own (`tools.ABOUT`). A Responses
        namespace (Codex's MCP servers, its agents) is the same for each tool in it."""
        if not isinstance(tool, dict):
            return tool
        if self.api == "responses" and tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
            name = f"{tool.get('name')}." if isinstance(tool.get("name"), str) else ""
            return {**tool, "tools": [self._tool(t, sections, name) for t in tool["tools"]]}
        if self.api == "openai":
            spec = tool.get("function") if tool.get("type") == "function" else None
        elif self.api == "responses":
            spec = tool if tool.get("type", "function") == "function" else None
        else:
            spec = tool if tool.get("type", "custom") == "custom" and tool.get("defer_loading") is not True else None
        text, name = (spec or {}).get("description"), (spec or {}).get("name")
        if not (isinstance(spec, dict) and isinstance(text, str) and isinstance(name, str)) or \
                len(text) < MIN_DESCRIPTION or text.startswith(ABOUT):
            return tool
        sections.append((f"TOOL {space}{name}", text))
        stubbed = {**spec, "description": STUB.format(name=space + name)}
        return {**tool, "function": stubbed} if self.api == "openai" else stubbed

    def _opened(self, message: dict[str, Any], drawn: Drawn) -> dict[str, Any]:
        """The first user message with the pages before what it says."""
        content = message.get("content")
        text = "input_text" if self.api == "responses" else "text"
        parts = [{"type": text, "text": content}] if isinstance(content, str) else list(content or [])
        url = (f"data:{MEDIA_TYPE};base64,{data}" for data in drawn.images)
        if self.api == "anthropic":
            pages = [{"type": "image", "source": {"type": "base64", "media_type": MEDIA_TYPE, "data": data}}
                     for data in drawn.images]
        elif self.api == "responses":
            detail = get_cost_model(self.vision).image_detail or "auto"  # as `export.to_responses` sends pages
            pages = [{"type": "input_image", "image_url": u, "detail": detail} for u in url]
        else:
            pages = [{"type": "image_url", "image_url": {"url": u}} for u in url]
        return {**message, "content": [{"type": text, "text": HEAD.format(n=len(pages))}, *pages, *parts]}


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


IMAGES = frozenset({"image", "image_url", "input_image"})  # an image's part, in each API


def _images(items: list[Any]) -> int:
    """The images in a request's messages or items, tool results' included."""
    count, stack = 0, list(items)
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            count += value.get("type") in IMAGES
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
