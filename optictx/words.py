"""What a person said in a user message, apart from what agents wrap around it: Claude Code's
`<system-reminder>` and command wrappers, Codex's `<environment_context>` and
`<user_instructions>`, each a tagged block that starts a line. One rule for every use: a
conversation's title, and which message holds the person's task (the pin)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from .turns import Turn

# Looked for in a bounded head of each message, a bounded number of times: a glance, never a scan
# of a megabyte pasted into a message.
_OPEN = re.compile(r"<([A-Za-z][\w-]*)[^<>]*>")
HEAD, _TAGS = 65_536, 200


def outside_wrappers(text: str) -> str:
    """`text` without the tagged blocks that start a line and are closed (an agent's wrappers);
    a tag inline, or never closed, is the person's text and stays."""
    text = text[:HEAD]
    parts, pos, unclosed = [], 0, set()
    for _ in range(_TAGS):
        if (m := _OPEN.search(text, pos)) is None:
            break
        name = m.group(1)
        opens_a_line = text[:m.start()].endswith("\n") or not text[:m.start()].strip()
        end = -1 if name in unclosed or not opens_a_line else text.find(f"</{name}>", m.end())
        if end < 0:  # not a wrapper (inline, or never closed): its text stays
            unclosed.add(name)
            parts.append(text[pos : m.end()])
            pos = m.end()
        else:
            parts.append(text[pos : m.start()] + " ")
            pos = end + len(name) + 3
    parts.append(text[pos:])
    return "".join(parts)


def said(turn: Turn) -> str:
    """The person's words in `turn` on one line ("" for any turn but a user's, and for a user
    message that holds only what an agent wrapped around it)."""
    return " ".join(outside_wrappers(turn.text).split()) if turn.role == "user" else ""


def first_said(turns: Sequence[Turn]) -> int | None:
    """The index of the first turn that holds a person's words: the task."""
    return next((i for i, t in enumerate(turns) if said(t)), None)
