"""LangChain with an optictx memory: the history a chain reads is the fitted context, old turns
as page images (pip install 'optictx[langchain]').

    python examples/langchain_history.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from optictx.errors import MissingExtraError, need

try:  # an optional framework: say which extra installs it rather than fail on a bare import
    need("langchain_core", "langchain")
except MissingExtraError as exc:
    sys.exit(f"this example needs {exc} (from this clone: .venv/bin/pip install -e '.[langchain]')")

from langchain_core.messages import HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

from optictx.adapters.langchain import OptictxChatMessageHistory

history = OptictxChatMessageHistory(vision="openai:gpt-4o", budget=4000, keep_recent=4)
sample = Path(__file__).with_name("sample_agent.jsonl").read_text().splitlines()
for line in sample:
    history.memory.add(json.loads(line))
history.add_messages([HumanMessage(content="Which commit fixed the rounding bug?")])

prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history")])
messages = prompt.invoke({"history": history.messages}).to_messages()
images = sum(1 for m in messages if isinstance(m.content, list) for p in m.content if p.get("type") == "image_url")
print(f"{len(sample) + 1} turns -> {len(messages)} LangChain messages, {images} page images, "
      f"{history.memory.context().tokens} tokens (budget 4000)")
# Hand `messages` to any LangChain chat model that reads images, e.g. ChatOpenAI(model="gpt-4o").
