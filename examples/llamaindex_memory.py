"""LlamaIndex with an optictx memory: a chat engine whose memory is fitted to a budget, old turns
as ImageBlocks (pip install 'optictx[llamaindex]'). MockLLM stands in for a real one.

    python examples/llamaindex_memory.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from optictx.errors import MissingExtraError, need

try:  # an optional framework: say which extra installs it rather than fail on a bare import
    need("llama_index.core", "llamaindex")
except MissingExtraError as exc:
    sys.exit(f"this example needs {exc} (from this clone: .venv/bin/pip install -e '.[llamaindex]')")

from llama_index.core.base.llms.types import ImageBlock
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import MockLLM

from optictx.adapters.llama_index import OptictxMemory

memory = OptictxMemory.from_defaults(vision="openai:gpt-4o", budget=4000, keep_recent=4)
for line in Path(__file__).with_name("sample_agent.jsonl").read_text().splitlines():
    memory.memory.add(json.loads(line))
engine = SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=8), memory=memory)  # use OpenAI(...) for real
engine.chat("Which commit fixed the rounding bug?")
fitted = memory.get()
images = sum(isinstance(b, ImageBlock) for m in fitted for b in m.blocks)
print(f"{len(memory.get_all())} turns -> {len(fitted)} messages, {images} page images, "
      f"{memory.memory.context().tokens} tokens (budget 4000)")
