"""LangChain: a chat message history backed by an optictx Memory. `add_messages` stores turns;
`messages` is the fitted context, old turns as image blocks (OpenAI-style image_url parts,
which LangChain's chat models take). `optictx_tools(memory)`: its `search` and `recall` as
LangChain tools, for `model.bind_tools(...)`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import need

need("langchain_core", "langchain")

from langchain_core.chat_history import BaseChatMessageHistory  # noqa: E402
from langchain_core.messages import BaseMessage, convert_to_messages, convert_to_openai_messages  # noqa: E402
from langchain_core.tools import BaseTool, StructuredTool  # noqa: E402

from ..memory import Memory  # noqa: E402


class OptictxChatMessageHistory(BaseChatMessageHistory):
    """A LangChain `BaseChatMessageHistory` over `memory` (default: a new `Memory(**settings)`).

    >>> history = OptictxChatMessageHistory(budget=4000)
    >>> history.add_user_message("hello")
    >>> [m.content for m in history.messages]
    ['hello']
    """

    def __init__(self, memory: Memory | None = None, **settings: Any) -> None:
        self._settings = settings
        self.memory = memory if memory is not None else Memory(**settings)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The memory's context under its budget, as LangChain messages."""
        return convert_to_messages(self.memory.context().to_openai())

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        with self.memory.batch():
            for message in convert_to_openai_messages(list(messages)):
                self.memory.add(message)

    def clear(self) -> None:
        """Start an empty memory with the same settings (a memory never forgets its own
        transcript: a stored one keeps its file; open it with `Memory.open` to read it)."""
        self.memory = Memory(**self._settings)


def optictx_tools(memory: Memory) -> list[BaseTool]:
    """`search` and `recall` over `memory` as LangChain tools: the exact turns behind a page, one
    call away (`Memory.tools`)."""
    return [StructuredTool.from_function(fn, name=fn.__name__, description=fn.__doc__ or "")
            for fn in memory.tools().functions()]
