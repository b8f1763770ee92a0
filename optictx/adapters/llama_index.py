"""LlamaIndex: a chat memory backed by an optictx Memory. `put` stores turns; `get` is the
fitted context as `ChatMessage`s, old turns as `ImageBlock`s of the page images.
`optictx_tools(memory)`: its `search` and `recall` as LlamaIndex `FunctionTool`s, for an agent."""

from __future__ import annotations

import base64
import re
from typing import Any

from ..errors import need

need("llama_index.core", "llamaindex")

from llama_index.core.base.llms.types import ChatMessage, ImageBlock, TextBlock  # noqa: E402
from llama_index.core.memory.types import BaseMemory  # noqa: E402
from llama_index.core.tools import FunctionTool  # noqa: E402
from pydantic import ConfigDict, Field  # noqa: E402

from ..memory import Memory  # noqa: E402
from ..turns import image_url  # noqa: E402

_DATA = re.compile(r"data:(image/[\w.+-]+);base64,")


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str) or content is None:
        return [TextBlock(text=content or "")]
    out: list[Any] = []
    for part in content:
        if part.get("type") == "text":
            out.append(TextBlock(text=part["text"]))
        elif part.get("type") == "image_url":
            url = image_url(part)
            if m := _DATA.match(url):  # the image itself (a page: images.MEDIA_TYPE), as LlamaIndex keeps bytes
                out.append(ImageBlock(image=base64.b64decode(url[m.end():]), image_mimetype=m.group(1)))
            else:
                out.append(ImageBlock(url=url))
    return out


def to_chat_message(message: dict[str, Any]) -> ChatMessage:
    """An OpenAI-style message as a LlamaIndex ChatMessage (tool fields in additional_kwargs, as
    LlamaIndex's OpenAI integration keeps them)."""
    extra = {k: message[k] for k in ("tool_calls", "tool_call_id", "name") if message.get(k)}
    return ChatMessage(role=message["role"], blocks=_blocks(message.get("content")), additional_kwargs=extra)


def to_turn(message: ChatMessage) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    for block in message.blocks:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            url = str(block.url) if block.url else f"data:{block.image_mimetype or 'image/png'};base64," + (
                block.image.decode() if block.image else "")  # LlamaIndex keeps image bytes base64-encoded
            parts.append({"type": "image_url", "image_url": {"url": url}})
    content: Any = parts[0]["text"] if len(parts) == 1 and parts[0]["type"] == "text" else parts
    turn: dict[str, Any] = {"role": str(message.role.value), "content": content}
    kwargs = message.additional_kwargs
    if kwargs.get("tool_calls"):
        # dicts, or the OpenAI SDK's tool-call objects that LlamaIndex's OpenAI LLM keeps
        turn["tool_calls"] = [c.model_dump() if hasattr(c, "model_dump") else dict(c) for c in kwargs["tool_calls"]]
    if kwargs.get("tool_call_id"):
        turn["tool_call_id"] = kwargs["tool_call_id"]
    return turn


class OptictxMemory(BaseMemory):
    """A LlamaIndex `BaseMemory` over an optictx `Memory` (`OptictxMemory.from_defaults(budget=...)`)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    memory: Any = Field(description="the optictx Memory")
    settings: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def class_name(cls) -> str:
        return "OptictxMemory"

    @classmethod
    def from_defaults(cls, memory: Memory | None = None, **settings: Any) -> OptictxMemory:  # type: ignore[override]
        return cls(memory=memory if memory is not None else Memory(**settings), settings=settings)

    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        """The fitted context (`input` is not used: what fits does not depend on the question)."""
        return [to_chat_message(m) for m in self.memory.context().to_openai()]

    def get_all(self) -> list[ChatMessage]:
        """Every turn, verbatim."""
        return [to_chat_message(t.to_openai()) for t in self.memory.transcript()]

    def put(self, message: ChatMessage) -> None:
        self.memory.add(to_turn(message))

    def set(self, messages: list[ChatMessage]) -> None:
        """Start over with `messages` (a new memory with the same settings)."""
        self.reset()
        with self.memory.batch():
            for m in messages:
                self.memory.add(to_turn(m))

    def reset(self) -> None:
        self.memory = Memory(**self.settings)


def optictx_tools(memory: Memory) -> list[FunctionTool]:
    """`search` and `recall` over `memory` as LlamaIndex tools: the exact turns behind a page,
    one call away (`Memory.tools`)."""
    return [FunctionTool.from_defaults(fn=fn, name=fn.__name__, description=fn.__doc__ or "")
            for fn in memory.tools().functions()]
