"""A chat app through `optictx serve`: the app keeps sending its whole history, as chat apps do;
the proxy fits it to the budget and says what it sent.

    optictx serve --upstream https://api.openai.com/v1 --budget 3000   # in one terminal
    OPENAI_API_KEY=... python examples/chat_app.py                    # in another

The history starts with the shipped sample agent session, so the proxy has old turns to turn
into pages; then type questions (an empty line ends). OPTICTX_PROXY (default
http://127.0.0.1:8765/v1) and OPTICTX_MODEL (default gpt-4o) say where and what.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from openai import OpenAI

HISTORY = Path(__file__).with_name("sample_agent.jsonl")


def main() -> None:
    # The one line a chat app changes: its base URL points at the proxy.
    client = OpenAI(base_url=os.environ.get("OPTICTX_PROXY", "http://127.0.0.1:8765/v1"),
                    api_key=os.environ.get("OPENAI_API_KEY", "none"))
    model = os.environ.get("OPTICTX_MODEL", "gpt-4o")
    history = [json.loads(line) for line in HISTORY.read_text().splitlines()]
    print(f"{len(history)} messages of history; ask away (empty line: quit)")
    for line in sys.stdin:
        question = line.strip()
        if not question:
            break
        history.append({"role": "user", "content": question})
        raw = client.chat.completions.with_raw_response.create(model=model, messages=history)
        answer = raw.parse().choices[0].message.content or ""
        history.append({"role": "assistant", "content": answer})
        sent, original = raw.headers.get("x-optictx-tokens", "?/?").split("/")
        print(f"> {answer}\n  [sent {sent} tokens upstream for a history of {original}; "
              f"conversation {raw.headers.get('x-optictx-conversation')}]")


if __name__ == "__main__":
    main()
