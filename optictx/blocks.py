"""How a turn is drawn on a page: a role header, then its prose, its code (fenced, or tool
output) and its calls, as blocks the layout lays out (`renderers.Block`)."""

from __future__ import annotations

import hashlib
import json
import re

from .renderers import Block
from .renderers.codewrap import TRIPLE
from .turns import Turn

_FENCE = re.compile(r"^```[^\n]*\n(.*?)(?:^```[ \t]*$|\Z)", re.M | re.S)


# What a page shows of a turn that stays text in place (`TurnIndex.note`): its header and where
# its text is, since the pages are read in order and it sits between them.
IN_PLACE = " \u2192 after page"


def short_id(call_id: str) -> str:
    """A tool call's id as a page shows it: a short id as it is; a long one as four digits drawn
    from it (`[3275]` for toolu_01W9LCHJ6mYamqQfjEYBkiZ1), enough to pair a call with its result
    on the pages around it (a call and its result always follow each other there); the transcript
    keeps the whole id. Digits, not the id's own last characters: in a header's bold type at TINY
    both readers confused `B`/`8`, `S`/`5`, `C`/`c` and `O`/`0` in those (43% of what the reflex
    reader lost on Claude Code's pages), and read the turn numbers beside them almost without
    fault (BENCHMARKS.md, "Calls' code drawn as lines, and calls paired by four digits")."""
    if len(call_id) <= 8:
        return call_id
    return f"{int(hashlib.sha256(call_id.encode()).hexdigest()[:8], 16) % 10_000:04d}"


def turn_blocks(turn: Turn, in_place: bool = False, program: bool = True) -> list[Block]:
    """How a turn is drawn: a role header, then prose, code (fenced or tool output) and calls;
    only the header, saying where its text is, for a turn that stays text `in_place`. With
    `program` (code laid out as a program: `RenderConfig.code_layout`), a call's multi-line
    arguments are drawn as their lines (`arguments`); without, as the call sent them."""
    role = "tool result" if turn.role == "tool" else turn.role
    head = f"#{turn.id} {role.upper()}" if turn.id is not None else role.upper()
    if turn.name:
        head += f" \u00b7 {turn.name}"
    if turn.tool_call_id:
        head += f" [{short_id(turn.tool_call_id)}]"
    if in_place:
        return [Block(head + IN_PLACE, "header")]
    blocks = [Block(head, "header")]
    text = turn.text
    if turn.role == "tool":
        if text:
            blocks.append(Block(text, "code"))
    else:
        pos = 0
        for m in _FENCE.finditer(text):
            if m.start() > pos:
                blocks.append(Block(text[pos:m.start()].strip("\n"), "text"))
            blocks.append(Block(m.group(1).rstrip("\n"), "code"))
            pos = m.end()
        if text[pos:].strip() or (pos == 0 and not turn.tool_calls):
            blocks.append(Block(text[pos:].strip("\n"), "text"))
    for call in turn.tool_calls:
        # The id first: after the arguments a wrap could part "[" from the rest of it.
        args = arguments(call.function.arguments) if program else call.function.arguments
        blocks.append(Block(f"call [{short_id(call.id)}] {call.function.name}({args})", "code"))
    return blocks


def arguments(text: str) -> str:
    """A call's arguments as a page draws them: as sent, but where a top-level string holds
    several lines (the code of an edit, a file written, a script), that string is drawn as its
    lines between triple quotes, as Python writes a long string, and the item after it starts a
    line of its own. Escaped in JSON, an edit's code is one run of `\\n`s with no line and no
    indentation left; drawn as lines it keeps its shape. The other values are drawn as JSON
    (written again: `1e5` is drawn `100000.0`); the transcript keeps the exact bytes."""
    if "\\n" not in text:
        return text
    try:
        args = json.loads(text)
    except (ValueError, RecursionError):
        return text
    if not isinstance(args, dict) or not any(_quote(v) for v in args.values()):
        return text
    out, after_lines = "{", False
    for i, (k, v) in enumerate(args.items()):
        quote = _quote(v)
        if i:
            out += ",\n" if quote or after_lines else ", "
        value = f"{quote}\n{v}{quote}" if quote else json.dumps(v, ensure_ascii=False)
        out += f"{json.dumps(k, ensure_ascii=False)}: {value}"
        after_lines = bool(quote)
    return out + "}"


def _quote(value: object) -> str | None:
    """The triple quote a string value is drawn as its lines between: three double quotes, or
    three single ones where it holds those (a Python docstring) or ends with one; None where it
    is drawn as JSON: no line break, neither quote possible (either would end it early, or run
    into its last character), or a carriage return (which would fold two lines into one). Tabs
    are drawn as a tool result's are, as indentation."""
    if not isinstance(value, str) or "\n" not in value or "\r" in value:
        return None
    return next((q for q in (TRIPLE, "'''") if q not in value and not value.endswith(q[0])), None)
