"""Conversation files: JSONL of OpenAI-style messages, one per line."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .errors import ConversationFileError
from .turns import Turn, to_turn


def read_jsonl(path: str | Path) -> list[Turn]:
    """Parse a conversation file into Turns; errors name the file and the line."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConversationFileError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    turns: list[Turn] = []
    # Lines end at "\n" (and "\r\n") only: str.splitlines would also split at U+2028, U+0085 and
    # other characters that JSON strings may hold raw.
    for lineno, line in enumerate(raw.decode("utf-8", errors="surrogateescape").split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise ConversationFileError(f"{path}:{lineno}: not valid JSON ({exc})") from exc
        except RecursionError:
            raise ConversationFileError(f"{path}:{lineno}: JSON nested too deeply to read") from None
        try:
            turns.append(to_turn(obj))
        except (TypeError, ValueError) as exc:
            raise ConversationFileError(f"{path}:{lineno}: not a valid message ({exc})") from exc
    if not turns:
        raise ConversationFileError(f"{path}: no messages in the file")
    return turns


def write_jsonl(path: str | Path, messages: Iterable[dict[str, Any]]) -> None:
    with Path(path).open("w", encoding="utf-8") as f:
        for m in messages:
            f.write(json.dumps(m, ensure_ascii=False) + "\n")
