"""A short agent loop with optictx: add every turn, send a budgeted context each step, and give
the model `search` and `recall` to get the exact words behind any page it sees.

Set OPTICTX_BASE_URL (any OpenAI-compatible server: vLLM, Ollama, OpenAI) and optionally
OPTICTX_MODEL / OPENAI_API_KEY. With no endpoint set it prints what it would send.

    python examples/agent_loop.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from optictx import Budget, Memory

HISTORY = Path(__file__).with_name("sample_agent.jsonl")
MAX_TOOL_ROUNDS = 4  # recalls a model may make before it must answer
QUESTIONS = [
    "Which commit fixed the rounding bug in task 3, and what did it change?",
    "List the modules we touched today.",
    "What was the status of the last invoice you fetched?",
]


def describe(messages: list[dict]) -> str:
    parts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            images = sum(1 for p in content if p.get("type") == "image_url")
            parts.append(f"{m['role']}[{images} page images]")
        else:
            parts.append(m["role"] + ("+tool_calls" if m.get("tool_calls") else ""))
    return ", ".join(parts)


def main() -> None:
    base_url = os.environ.get("OPTICTX_BASE_URL")
    model = os.environ.get("OPTICTX_MODEL", "gpt-4o")
    mem = Memory(vision="openai:gpt-4o" if base_url else "deepseek-ocr", budget=Budget(tokens=8192), keep_recent=6)
    for line in HISTORY.read_text(encoding="utf-8").splitlines():
        mem.add(json.loads(line))  # a long session so far
    client = None
    if base_url:
        from openai import OpenAI

        client = OpenAI(base_url=base_url, api_key=os.environ.get("OPENAI_API_KEY", "unused"))
    tools = mem.tools()  # search and recall over this memory
    for question in QUESTIONS:
        mem.add({"role": "user", "content": question})
        for _ in range(MAX_TOOL_ROUNDS + 1):
            ctx = mem.context(tools=("search", "recall"))  # the caption tells the model about them
            messages = ctx.to_openai()
            stats = mem.stats(ctx)
            print(f"> {question}")
            print(f"  sending {len(messages)} messages ({describe(messages)})")
            print(f"  {ctx.tokens} context tokens instead of {stats['text_tokens']} as text ({stats['ratio']}x fewer)")
            if client is None:
                answer, calls = "(no OPTICTX_BASE_URL set: nothing sent)", []
            else:
                reply = client.chat.completions.create(model=model, messages=messages, tools=tools.openai())
                answer, calls = reply.choices[0].message.content or "", reply.choices[0].message.tool_calls or []
            if not calls:
                break
            mem.add({"role": "assistant", "content": answer, "tool_calls": [c.model_dump() for c in calls]})
            for call in calls:  # each answered from the store, in the shape it came in
                result = tools.run(call)
                print(f"  {call.function.name}({call.function.arguments}) -> {result['content'][:80]!r}")
                mem.add(result)
        mem.add({"role": "assistant", "content": answer})
        print(f"  assistant: {answer}")


if __name__ == "__main__":
    main()
