"""What a page keeps of a program's shape, measured from the renderer's own layout (no reader):
character accuracy cannot see an identifier cut in two or an indentation lost where a line
wrapped, and a page can keep every character and lose the program.

Over the code and tool output of some turns (the blocks `blocks.turn_blocks` draws as code):

- `atoms_unbroken`: the share of identifiers, numbers and paths (`codewrap.ATOM`) no wider
  than a column that are drawn whole on one line;
- `indent_kept`: the share of indented source lines whose every drawn line (continuations
  included) starts at least as far in as the source line's indentation;
- `wrapped`: the share of source lines drawn on more than one line;
- `call_lines_drawn`: the share of the lines a call's multi-line string arguments hold (the code
  of an edit, a file written, a script: the oracle is the call's own JSON) drawn as lines of
  their own, where the indentation above can be kept; escaped in JSON, none is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..blocks import turn_blocks
from ..renderers import Block, Layout, Line
from ..renderers.codewrap import ATOM, HANG, gutter_width, hang_of, indent_of
from ..renderers.layout import is_rule
from ..turns import Turn

_CLOSED = re.compile(r"(?:\"\"\"|''')(?:,|\}\))$")  # a string argument's last line, its quote closed after it
_GUTTER = re.compile(r"^ *\d{1,7}(?:\u2192|\t| {1,4})")  # a line-number gutter as a client writes it


@dataclass
class Structure:
    atoms: int = 0
    atoms_whole: int = 0
    indented: int = 0
    indent_kept: int = 0
    lines: int = 0
    wrapped: int = 0
    call_lines: int = 0
    call_lines_drawn: int = 0

    def add(self, other: Structure) -> None:
        for k, v in vars(other).items():
            setattr(self, k, getattr(self, k) + v)

    def report(self) -> dict[str, float | int]:
        def share(a: int, b: int) -> float:
            return round(100 * a / b, 2) if b else 100.0
        return {"atoms_unbroken": share(self.atoms_whole, self.atoms),
                "indent_kept": share(self.indent_kept, self.indented),
                "wrapped": share(self.wrapped, self.lines),
                "call_lines_drawn": share(self.call_lines_drawn, self.call_lines), "atoms": self.atoms,
                "indented_lines": self.indented, "code_lines": self.lines, "call_lines": self.call_lines}


def _groups(lines: list[Line], paras: list[str]) -> Iterable[tuple[str, list[str]]]:
    """Each non-blank source line with the lines drawn for it, matched on their characters less
    blanks (a wrap drops the blank it breaks at, a continuation adds its indent)."""
    drawn = [ln.text for ln in lines if ln.style != "rule" and ln.text.strip()]
    at = 0
    for para in paras:
        want = len("".join(para.split()))
        if not want or is_rule(para):
            continue
        got: list[str] = []
        have = 0
        while at < len(drawn) and have < want:
            got.append(drawn[at])
            have += len("".join(drawn[at].split()))
            at += 1
        yield para, got


def _plain(text: str, listing: bool) -> str:
    """A line less its line-number gutter, where it has one: drawn compact in a `listing`
    (`codewrap.gutter_width`), else as a client writes it."""
    if listing:
        return text[gutter_width(text, listing):]
    m = _GUTTER.match(text)
    return text[m.end():] if m else text


def block_structure(block: Block, layout: Layout) -> Structure:
    """The shape kept of one code block."""
    out = Structure()
    room = layout.config.text_width
    measure = layout.measure("code")
    columns = int(room // (measure(" ") or 1))
    shown = [layout.shown(p, "code") for p in layout.source(block)]  # as drawn: controls escaped, rules cut
    listing = layout.listing(block)
    for para, drawn in _groups(layout.lines(block), shown):
        if not drawn:
            continue
        out.lines += 1
        out.wrapped += len(drawn) > 1
        for m in ATOM.finditer(_plain(para, listing)):
            if measure(m.group()) <= room:
                out.atoms += 1
                out.atoms_whole += any(m.group() in d for d in drawn)
        code = _plain(para, listing)
        indent = len(code) - len(code.lstrip(" "))
        if indent:  # the first line keeps the code's own indent; continuations start under it
            out.indented += 1
            first, rest = drawn[0], drawn[1:]
            under = min(indent_of(first, listing), hang_of(first, columns, listing) - HANG)
            shown_first = _plain(first, listing)
            out.indent_kept += (len(shown_first) - len(shown_first.lstrip(" ")) >= indent and
                                all(len(d) - len(d.lstrip(" ")) >= under for d in rest))
    return out


def structure(turns: Iterable[Turn], layout: Layout) -> Structure:
    """The shape kept of every code block of `turns`."""
    out = Structure()
    for turn in turns:
        blocks = turn_blocks(turn, program=layout.config.program)
        for block in blocks:
            if block.style == "code":
                out.add(block_structure(block, layout))
        for call, block in zip(turn.tool_calls, blocks[len(blocks) - len(turn.tool_calls):]):
            drawn = {_CLOSED.sub("", para).strip() for para in layout.source(block)}
            for line in _argument_lines(call.function.arguments):
                out.call_lines += 1
                out.call_lines_drawn += line.expandtabs(layout.config.tab_width).strip() in drawn
    return out


def _argument_lines(arguments: str) -> list[str]:
    """The non-blank lines of a call's top-level string arguments that hold more than one."""
    try:
        args = json.loads(arguments)
    except (ValueError, RecursionError):
        return []
    if not isinstance(args, dict):
        return []
    return [line for v in args.values() if isinstance(v, str) and "\n" in v for line in v.split("\n") if line.strip()]
