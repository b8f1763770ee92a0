"""The framework adapters on the real packages: a LangChain chain with message history and a
LlamaIndex chat engine, each backed by a Memory whose old turns come back as images."""

from __future__ import annotations

import pytest
from conftest import needs

from optictx import Memory
from optictx.errors import TurnError


def _filled(sample, budget=2500):
    mem = Memory(budget=budget, keep_recent=4)
    for m in sample[:80]:
        mem.add(m)
    return mem


@needs("langchain_core", "langchain")
def test_langchain_history_gives_the_fitted_context_with_image_blocks_and_stores_tool_pairs(sample):
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
    from langchain_core.runnables import RunnableLambda

    from optictx.adapters.langchain import OptictxChatMessageHistory

    history = OptictxChatMessageHistory(_filled(sample))
    seen = []

    def model(prompt):  # the chat model's place: records what it was given, answers
        seen.append(prompt.to_messages())
        return AIMessage(content="noted")

    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{question}")])
    chain = prompt | RunnableLambda(model)
    question = "what did the tests say?"
    answer = chain.invoke({"history": history.messages, "question": question})
    history.add_messages([HumanMessage(content=question), answer])
    assert answer.content == "noted"
    given = seen[0]
    images = [p for m in given if isinstance(m.content, list) for p in m.content if p.get("type") == "image_url"]
    assert images and images[0]["image_url"]["url"].startswith("data:image/webp;base64,")
    assert history.memory.context().tokens <= 2500
    assert [t.text for t in history.memory.transcript()[-2:]] == ["what did the tests say?", "noted"]
    history.add_messages([AIMessage(content="", tool_calls=[{"name": "f", "args": {"a": 1}, "id": "c9"}]),
                          ToolMessage(content="42", tool_call_id="c9"), HumanMessage(content="thanks")])
    last = history.memory.transcript()[-3:]
    assert last[0].tool_calls[0].id == "c9" and last[1].tool_call_id == "c9" and last[2].text == "thanks"
    history.clear()
    assert history.messages == []


@needs("llama_index.core", "llamaindex")
def test_llama_index_memory_feeds_a_chat_engine_with_image_blocks(sample):
    from llama_index.core.base.llms.types import ChatMessage, ImageBlock
    from llama_index.core.chat_engine import SimpleChatEngine
    from llama_index.core.llms import MockLLM

    from optictx.adapters.llama_index import OptictxMemory

    memory = OptictxMemory.from_defaults(_filled(sample), budget=2500, keep_recent=4)
    fitted = memory.get()
    assert any(isinstance(b, ImageBlock) for m in fitted for b in m.blocks)
    assert len(memory.get_all()) == 80
    engine = SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=5), memory=memory)
    engine.chat("what did the tests say?")
    transcript = memory.memory.transcript()
    assert transcript[-2].text == "what did the tests say?" and transcript[-1].role == "assistant"
    memory.put(ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [
        {"id": "c7", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}))
    memory.put(ChatMessage(role="tool", content="ok", additional_kwargs={"tool_call_id": "c7"}))
    assert memory.memory.transcript()[-1].tool_call_id == "c7"
    memory.set([ChatMessage(role="user", content="fresh start")])
    assert [m.content for m in memory.get()] == ["fresh start"]
    with pytest.raises(TurnError, match="role"):
        memory.put(ChatMessage(role="function", content="x"))  # refused by name, nothing stored
    assert len(memory.memory.transcript()) == 1


@pytest.mark.parametrize("example, extra", [("langchain_history.py", "langchain_core"),
                                            ("llamaindex_memory.py", "llama_index.core")])
def test_the_adapter_examples_run(example, extra):
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip(extra)
    path = Path(__file__).resolve().parents[1] / "examples" / example
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "page images" in done.stdout and "budget 4000" in done.stdout


def _page_and_its_turns(mem: Memory) -> tuple[str, list]:
    """An image page's handle, and the stored turns it holds (the oracle: the store's transcript)."""
    page = next(s.page for s in mem.context().pages if s.tier.is_image and s.page.sealed)
    ids = set(page.turn_ids)
    return page.handle, [t for t in mem.transcript() if t.id in ids]


def _needle(turns: list) -> str:
    """A word of a tool result that starts on the page (a turn continued from the page before is
    named by that page): its longest."""
    return max(next(t for t in turns[1:] if t.role == "tool" and t.text.strip()).text.split(), key=len)


@needs("langchain_core", "langchain")
def test_langchain_tools_give_back_the_exact_turns_behind_a_page(sample):
    from langchain_core.tools import BaseTool

    from optictx.adapters.langchain import optictx_tools

    mem = _filled(sample)
    search, recall = optictx_tools(mem)
    assert isinstance(search, BaseTool) and (search.name, recall.name) == ("search", "recall")
    assert set(recall.args) == {"page", "turns", "lines", "grep", "offset"} and "page image" in recall.description
    handle, turns = _page_and_its_turns(mem)
    text = recall.invoke({"page": handle})
    assert all(t.text in text for t in turns if t.text)  # word for word, as stored
    assert f"(page {handle})" in search.invoke({"query": _needle(turns), "within": handle, "limit": 50})
    assert recall.invoke({"page": "not-a-handle"}).startswith("error:")  # said to the model, not raised


@needs("llama_index.core", "llamaindex")
def test_llama_index_tools_give_back_the_exact_turns_behind_a_page(sample):
    from llama_index.core.tools import FunctionTool

    from optictx.adapters.llama_index import optictx_tools

    mem = _filled(sample)
    search, recall = optictx_tools(mem)
    assert isinstance(recall, FunctionTool) and recall.metadata.name == "recall"
    assert '"page"' in recall.metadata.fn_schema_str and "page image" in recall.metadata.description
    handle, turns = _page_and_its_turns(mem)
    text = recall.call(page=handle).content
    assert all(t.text in text for t in turns if t.text)
    assert f"(page {handle})" in search.call(query=_needle(turns), within=handle, limit=50).content
