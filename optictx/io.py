"""Conversation files: JSONL of OpenAI-style messages, one per line."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from .errors import ConversationFileError
from .turns import Turn, to_turn

MAX_LINE = 64 * 2**20  # bytes: one message past this is a damaged file, not a message


def lines(path: str | Path) -> Iterator[tuple[int, bytes]]:
    """A file's non-blank lines with their numbers, read one at a time, so a large file takes no
    more memory than its longest line: a line longer than MAX_LINE, or a path that is not a
    regular file (a FIFO would block, a device never end), is refused by name. Lines end at
    "\n" only: str.splitlines would also split at U+2028 and other characters JSON strings hold."""
    path = Path(path)
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise ConversationFileError(f"{path}: not a regular file")
        handle = path.open("rb")
    except OSError as exc:
        raise ConversationFileError(f"{path}: cannot read ({exc.strerror or exc})") from exc
    with handle:
        for n, line in enumerate(iter(lambda: handle.readline(MAX_LINE + 1), b""), 1):
            if len(line) > MAX_LINE:
                raise ConversationFileError(f"{path}:{n}: a line longer than {MAX_LINE} bytes")
            if line.strip():
                yield n, line


def read_jsonl(path: str | Path) -> list[Turn]:
    """Parse a conversation file into Turns; errors name the file and the line."""
    path = Path(path)
    turns: list[Turn] = []
    for lineno, line in lines(path):
        try:
            obj = json.loads(line.decode("utf-8", errors="surrogateescape"))
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
