"""What a person said in a user message, apart from what agents wrap around it: Claude Code's
`<system-reminder>` and command wrappers, Codex's `<environment_context>` and
`<user_instructions>`, each a tagged block that starts a line. One rule for every use: a
conversation's title, which message holds the person's task (the pin), and which turns stay
text in place, never drawn on a page (`keep`: the person's words and the instruction files a
client forwards)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from .turnindex import WORDS
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


# An instruction file a client forwards in a user message: Claude Code's CLAUDE.md (inside a
# <system-reminder>), Codex's AGENTS.md (its heading, or the older <user_instructions> tag).
_INSTRUCTIONS = re.compile(r"Codebase and user instructions are shown below|^# AGENTS\.md instructions for |"
                           r"^<user_instructions>", re.MULTILINE)


def is_words(turn: Turn) -> bool:
    """A user turn with a person's words in it, or an instruction file a client forwards."""
    return turn.role == "user" and bool(said(turn) or _INSTRUCTIONS.search(turn.text[:HEAD]))


def keep(turn: Turn) -> Turn:
    """`turn`, marked to stay text in place (`turnindex.WORDS`) when it holds a person's words."""
    if WORDS in turn.metadata or not is_words(turn):
        return turn
    return turn.model_copy(update={"metadata": {**turn.metadata, WORDS: True}})


def first_said(turns: Sequence[Turn]) -> int | None:
    """The index of the first turn that holds a person's words: the task."""
    return next((i for i, t in enumerate(turns) if said(t)), None)
