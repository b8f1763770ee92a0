"""Exporters: a fitted prompt (a `Context`, read through `Prompt`: its pieces, breakpoints and
vision model) as OpenAI chat messages, as OpenAI Responses API input items, or as an Anthropic
Messages API request. Each writes a page once, in its own API's shape."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Protocol

from .cost import CostModel
from .images import MEDIA_TYPE
from .pieces import PageSegment, Piece
from .turnindex import AS_SENT
from .turns import Turn, check_json, image_url


class Prompt(Protocol):
    """What an exporter reads of a context (the context calls the exporters, so it is not named)."""

    @property
    def pieces(self) -> tuple[Piece, ...]: ...
    @property
    def breakpoints(self) -> tuple[int, ...]: ...
    @property
    def vision(self) -> CostModel: ...


_DATA_URI = re.compile(r"^data:(image/[\w.+-]+);base64,(.*)$", re.S)


# How a page's image is written: its image (`images.MEDIA_TYPE`) as base64 text, or what a caller puts in its place (the
# proxy writes a placeholder and splices the text into the JSON it writes: `serve/body.py`).
Image = Callable[[PageSegment], str]


def _data(page: PageSegment, image: Image | None) -> str:
    return (image or PageSegment.image_base64)(page)


def _chat_page(data: str, detail: str | None) -> dict[str, Any]:
    image_url: dict[str, Any] = {"url": f"data:{MEDIA_TYPE};base64,{data}"}
    if detail:
        image_url["detail"] = detail
    return {"type": "image_url", "image_url": image_url}


def _responses_page(data: str, detail: str | None) -> dict[str, Any]:
    return {"type": "input_image", "image_url": f"data:{MEDIA_TYPE};base64,{data}", "detail": detail or "auto"}


def _anthropic_page(data: str, detail: str | None = None) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": MEDIA_TYPE, "data": data}}


# A page's image part in each API, from its base64 text and the consumer's `CostModel.image_detail`
# (the proxy's instruction pages are written the same way: `serve/instructions.py`).
PAGE_PARTS: dict[str, Callable[[str, str | None], dict[str, Any]]] = {
    "openai": _chat_page, "responses": _responses_page, "anthropic": _anthropic_page}


def _openai_parts(middle: list[PageSegment | str], detail: str | None, image: Image | None) -> list[dict[str, Any]]:
    return [{"type": "text", "text": p} if isinstance(p, str) else _chat_page(_data(p, image), detail) for p in middle]


_TURNS = ("system", "pinned", "inline", "recent")
Middle = list[PageSegment | str]  # what goes between the turns: the caption, image pages, text


def _sequence(ctx: Prompt) -> tuple[list[Turn | Middle], set[tuple[int, int]], set[int]]:
    """The context's turns and, at its place, what goes between them (the caption, image pages,
    and text: text pages, the open page, factsheet parts), the text pieces of one segment joined
    into one text. Pieces come in prompt order: system, pinned, that middle (with the turns that
    stay text in place between its pages), recent turns; or, in a verbatim context, every turn in
    the order it came.

    Also the places of the context's breakpoints: (item, -1) for a turn, (item, part) for a part
    of a middle, wherever the last piece before a breakpoint went; and the items that are the
    system prompt (leading system turns, not a system turn in place)."""
    out: list[Turn | Middle] = []
    marks: set[tuple[int, int]] = set()
    front: set[int] = set()
    ends = {b - 1 for b in ctx.breakpoints}
    segment = -1
    for i, piece in enumerate(ctx.pieces):
        if piece.kind in _TURNS:
            if piece.turn is not None:
                out.append(piece.turn)
                if i in ends:
                    marks.add((len(out) - 1, -1))
                if piece.kind == "system":
                    front.add(len(out) - 1)
        else:
            if not out or not isinstance(out[-1], list):
                out.append([])
            middle = out[-1]
            if piece.image is not None:
                middle.append(piece.image)
            elif piece.segment == segment and middle and isinstance(middle[-1], str):
                middle[-1] += "\n" + piece.text
            else:
                middle.append(piece.text)
            if i in ends:
                marks.add((len(out) - 1, len(middle) - 1))
        segment = piece.segment
    return out, marks, front


Message = Callable[[Turn], dict[str, Any]]


def to_openai(ctx: Prompt, message: Message | None = None, *, image: Image | None = None) -> list[dict[str, Any]]:
    """`message`: how a turn is written (default `Turn.to_openai`; a proxy gives the client's own);
    `image`: how a page's image is (default its PNG as base64)."""
    write = message or Turn.to_openai
    return [write(item) if isinstance(item, Turn) else
            {"role": "user", "content": _openai_parts(item, ctx.vision.image_detail, image)}
            for item in _sequence(ctx)[0]]


# -- OpenAI Responses ---------------------------------------------------------------------------

Items = Callable[[Turn], list[dict[str, Any]]]


def to_responses(ctx: Prompt, items: Items | None = None, *, image: Image | None = None) -> list[dict[str, Any]]:
    """Input items for OpenAI's Responses API: each turn as its items (`items`, default
    `response_items`; a proxy gives the client's own), and the caption, pages and text between
    turns as one user message of input_text and input_image parts (`image`: as in `to_openai`).
    The API caches a repeated prefix by itself: there is nothing to mark."""
    write = items or response_items
    detail = ctx.vision.image_detail
    out: list[dict[str, Any]] = []
    for item in _sequence(ctx)[0]:
        if isinstance(item, Turn):
            out.extend(write(item))
        else:
            out.append({"role": "user", "content": [
                {"type": "input_text", "text": p} if isinstance(p, str) else _responses_page(_data(p, image), detail)
                for p in item]})
    return out


def response_items(turn: Turn) -> list[dict[str, Any]]:
    """A turn as Responses API input items: a message (its text, or its parts as input_text,
    output_text and input_image), then a function_call per tool call; a tool turn as a
    function_call_output."""
    if turn.role == "tool":
        return [{"type": "function_call_output", "call_id": turn.tool_call_id, "output": turn.text}]
    out: list[dict[str, Any]] = []
    if turn.content or not turn.tool_calls:
        text = "output_text" if turn.role == "assistant" else "input_text"
        content: str | list[dict[str, Any]] = turn.content if isinstance(turn.content, str) else [
            {"type": text, "text": p["text"]} if p["type"] == "text" else
            {"type": "input_image", "image_url": image_url(p), "detail": "auto"} if p["type"] == "image_url" else
            {"type": text, "text": f"[{p['type']}]"} for p in turn.content]
        out.append({"role": turn.role, "content": content})
    out.extend({"type": "function_call", "call_id": c.id, "name": c.function.name, "arguments": c.function.arguments}
               for c in turn.tool_calls)
    return out


# -- Anthropic ---------------------------------------------------------------------------------

def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text if text.strip() else "(empty message)"}


def _anthropic_part(part: dict[str, Any]) -> dict[str, Any]:
    if part["type"] == "text":
        return _text_block(part["text"])
    if part["type"] == "image_url":
        url = image_url(part)
        m = _DATA_URI.match(url)
        if m:
            return {"type": "image", "source": {"type": "base64", "media_type": m.group(1), "data": m.group(2)}}
        if url.startswith(("http://", "https://")):
            return {"type": "image", "source": {"type": "url", "url": url}}
    return _text_block(f"[{part['type']} not forwarded]")


def _tool_input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments) if arguments.strip() else {}
        check_json(value, "arguments")  # nested past what a JSON encoder will write back
    except (ValueError, RecursionError):
        return {"_unparsed_arguments": arguments}  # keep what the model wrote; tool_use needs an object
    return value if isinstance(value, dict) else {"value": value}


def _anthropic_message(turn: Turn) -> dict[str, Any]:
    if turn.role == "tool":
        block = {"type": "tool_result", "tool_use_id": turn.tool_call_id, "content": turn.text or "(empty)"}
        return {"role": "user", "content": [block]}
    if isinstance(turn.content, str):
        blocks = [_text_block(turn.content)] if turn.content or not turn.tool_calls else []
    else:
        blocks = [_anthropic_part(p) for p in turn.content]
        if not blocks and not turn.tool_calls:  # an empty list: the API refuses empty content
            blocks = [_text_block("")]
    for call in turn.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.function.name,
                       "input": _tool_input(call.function.arguments)})
    return {"role": "assistant" if turn.role == "assistant" else "user", "content": blocks}


def _merge_roles(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic wants alternating roles, starting with the user: merge runs of one role. A
    system message a client wrote in the conversation (a beta of the API), and a message with
    fields beside its role and content (one a proxy keeps as it came), stay as they came."""
    out: list[dict[str, Any]] = []
    for m in messages:
        merge_into(out, m)
    if out and out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": [_text_block("(the conversation so far continues below)")]})
    return out


def merge_into(out: list[dict[str, Any]], m: dict[str, Any]) -> None:
    """`m` appended to `out`, or merged into its last message (`_merge_roles`, one step)."""
    if out and out[-1]["role"] == m["role"] in ("user", "assistant") and _plain(out[-1]) and _plain(m):
        # a new message: the merged ones stay as they were
        out[-1] = {**out[-1], "content": [*_blocks(out[-1]["content"]), *_blocks(m["content"])]}
    else:
        out.append(m)


def _plain(message: dict[str, Any]) -> bool:
    return message.keys() <= {"role", "content"}


def _blocks(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [_text_block(content)] if isinstance(content, str) else list(content)


# The cache_control this exporter writes: one object, so that a proxy can tell its own marks from
# a client's (`is`) when it must keep to the provider's limit of four.
MARK = {"type": "ephemeral"}


def _marked(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`blocks` (copied) with a breakpoint on the last one."""
    return [*blocks[:-1], {**blocks[-1], "cache_control": MARK}] if blocks else blocks


def to_anthropic(ctx: Prompt, message: Message | None = None, *, cache: bool = False, image: Image | None = None
                 ) -> tuple[str | list[dict[str, Any]], list[dict[str, Any]]]:
    """Leading system turns join the system prompt; the rest are messages, the pages as text and
    image blocks. A system turn in the conversation (`TurnIndex.note`) stays where it is: the
    Messages API takes one there only with a beta a client asks for, so it is written as a user
    message unless `message` (how a turn is written: a proxy gives the client's own blocks) says
    otherwise. Consecutive roles are merged. `image`: as in `to_openai`.

    `cache=True` marks the context's breakpoints with `cache_control` (at most four: the end of
    the system and pinned turns, of the frozen pages, of the prompt), and the system prompt then
    comes as a list of text blocks."""
    write = message or _anthropic_message
    system: list[str] = []
    system_marked = False
    messages: list[dict[str, Any]] = []
    items, marks, front = _sequence(ctx)
    for n, item in enumerate(items):
        if isinstance(item, Turn) and n in front:
            system.append(item.text)
            system_marked |= (n, -1) in marks
        elif isinstance(item, Turn):
            m = write(item)
            if cache and (n, -1) in marks and AS_SENT not in item.metadata:  # kept exactly as it came
                m = {**m, "content": _marked(_blocks(m["content"]))}
            messages.append(m)
        else:
            blocks = [_text_block(p) if isinstance(p, str) else _anthropic_page(_data(p, image)) for p in item]
            if cache:
                blocks = [{**b, "cache_control": MARK} if (n, j) in marks else b for j, b in enumerate(blocks)]
            messages.append({"role": "user", "content": blocks})
    text = "\n\n".join(system)
    if not cache:
        return text, _merge_roles(messages)
    blocks = [{"type": "text", "text": text}] if text else []
    return (_marked(blocks) if system_marked else blocks), _merge_roles(messages)
