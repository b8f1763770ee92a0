"""Text -> lines that fit the page width. Measures only; drawing is in draw.py."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from . import codewrap
from .atlas import GlyphInk
from .config import RenderConfig
from .fonts import REPLACEMENT, FontChain, FontSet, is_rtl
from .jsonwrap import json_items

# "wrap": a code line's continuation, indented under it and marked (`codewrap.py`); "ref": a line
# standing for lines the page already shows (drawn as code); "handle": the line a page opens with,
# its id (`optictx.handles`). The packer makes the last two.
Style = Literal["header", "text", "code", "wrap", "ref", "handle", "rule"]
ELLIPSIS = "\u2026"
# A source line that is only a long run of one rule character is decoration: it is drawn as a
# rule across the column, half a line high, and its text on the page is RULE (the run's exact
# length stays in the transcript).
RULE = "\u2500" * 4


def is_rule(line: str) -> bool:
    """Whether a source line is drawn as a rule (`RULE`), not as its characters."""
    return codewrap.RUN.fullmatch(line.strip(" ")) is not None


@dataclass(frozen=True, slots=True)
class Block:
    """A run of text in one style: a role header, prose, or code/tool output (monospace)."""

    text: str
    style: Style = "text"


@dataclass(frozen=True, slots=True)
class Line:
    """One laid-out line; `text` is exactly the characters drawn (a drawn rule's is `RULE`)."""

    text: str
    style: Style
    height: int


def _display_char(ch: str) -> str:
    cp = ord(ch)
    if cp < 0x20 or 0x7F <= cp <= 0x9F:  # C0/C1 controls and DEL: shown as a readable escape
        return f"\\x{cp:02x}"
    if 0xD800 <= cp <= 0xDFFF:  # lone surrogates cannot be encoded, let alone drawn
        return REPLACEMENT
    if unicodedata.category(ch) == "Cf":  # bidi overrides, zero-width marks: drawn as nothing
        return ""
    return ch


def displayable(text: str, chain: FontChain) -> str:
    """Map `text` to what can be drawn: controls shown as symbols, unknown glyphs as U+FFFD."""
    if text.isascii() and text.isprintable():
        return text  # the common case, and every ASCII printable is in DejaVu
    out = []
    for ch in text:
        shown = _display_char(ch)
        if len(shown) == 1 and chain.face_index(shown) < 0:
            shown = REPLACEMENT
        out.append(shown)
    return "".join(out)


_MEASURE_CHUNK = 4096


class Measurer:
    """Cached pixel widths of words for one chain (BASIC engine, or bidi for RTL words)."""

    def __init__(self, chain: FontChain, *, monospace: bool = False) -> None:
        self.chain = chain
        self._cache: dict[str, float] = {}
        # A monospace face (no kerning) makes ASCII widths arithmetic: code lines are mostly
        # unique strings, so caching alone would not spare FreeType a layout per line.
        self.advance = chain.faces[0].font.getlength("M") if monospace else None

    def width(self, s: str) -> float:
        if self.advance is not None and s.isascii():
            return len(s) * self.advance
        if len(s) > _MEASURE_CHUNK:
            # FreeType refuses strings over a million characters (Pillow's guard); a word this
            # long is wider than any line, so summing chunks (kerning lost at the seams) is enough.
            return sum(self.width(s[i : i + _MEASURE_CHUNK]) for i in range(0, len(s), _MEASURE_CHUNK))
        w = self._cache.get(s)
        if w is None:
            faces = self.chain.faces
            if s.isascii():  # the primary faces cover all of ASCII: no coverage lookups needed
                w = faces[0].font.getlength(s)
            else:
                w = 0.0
                for i, run in self.chain.runs(s):
                    face = faces[i]
                    w += (face.bidi if is_rtl(run) else face.font).getlength(run)
            if len(self._cache) < 200_000:
                self._cache[s] = w
        return w


def _break_word(word: str, m: Measurer, max_w: float) -> list[str]:
    """Split one over-long word (a URL, a hash, a code line) into pieces that each fit."""
    if m.advance is not None and word.isascii():  # monospace: the break points are arithmetic
        n = max(1, int(max_w // m.advance))
        return [word[i : i + n] for i in range(0, len(word), n)]
    pieces, cur, cur_w = [], "", 0.0
    for ch in word:
        w = m.width(ch)
        if cur and cur_w + w > max_w:
            pieces.append(cur)
            cur, cur_w = "", 0.0
        cur += ch
        cur_w += w
    if cur:
        pieces.append(cur)
    return pieces


def wrap_prose(paragraph: str, m: Measurer, max_w: float) -> list[str]:
    """Greedy word wrap; words wider than the line are broken by character."""
    space = m.width(" ")
    lines: list[str] = []
    cur: list[str] = []
    cur_w = 0.0
    for word in paragraph.split(" "):
        w = m.width(word) if word else 0.0
        if cur and cur_w + space + w <= max_w:
            cur.append(word)
            cur_w += space + w
            continue
        if cur:
            lines.append(" ".join(cur))
        if w > max_w:
            *full, last = _break_word(word, m, max_w)
            lines.extend(full)
            cur, cur_w = [last], m.width(last)
        else:
            cur, cur_w = [word], w
    lines.append(" ".join(cur))
    return lines


def wrap_code(line: str, m: Measurer, max_w: float) -> list[str]:
    """Hard wrap at the width, whitespace kept (tabs are expanded by the caller)."""
    if m.width(line) <= max_w:
        return [line]
    return _break_word(line, m, max_w)


def wrap_items(items: list[str], m: Measurer, max_w: float) -> list[str]:
    """Greedy fill that breaks between items; an item wider than a whole line carries on from
    where the line is and is broken by character."""
    lines: list[str] = []
    cur = ""
    for item in items:
        if m.width(cur + item.rstrip(" ")) <= max_w:
            cur += item
        elif m.width(item.rstrip(" ")) <= max_w:
            lines.append(cur.rstrip(" "))
            cur = item
        else:
            *full, cur = _break_word(cur + item, m, max_w)
            lines.extend(full)
    lines.append(cur.rstrip(" "))
    return lines


def _source_lines(text: str) -> list[str]:
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def paragraphs(text: str, tab_width: int) -> list[str]:
    """The source lines a block draws, without the whitespace that carries no meaning: line ends
    (a lone CR, as a terminal's progress line writes it, is one too), trailing blanks, blank
    lines at either end and all but one of a run. Tabs are expanded first: code keeps its indent."""
    out: list[str] = []
    for raw in _source_lines(text.expandtabs(tab_width)):
        line = raw.rstrip(" ")  # tabs are spaces by now; other blanks and controls stay visible
        if line or (out and out[-1]):
            out.append(line)
    while out and not out[-1]:
        out.pop()
    return out or [""]


class Layout:
    """Lays blocks out for one RenderConfig; reuse it: it caches fonts and word widths."""

    def __init__(self, config: RenderConfig | None = None) -> None:
        self.config = config or RenderConfig()
        self.fonts = FontSet.for_config(self.config)
        self.ink = GlyphInk()  # glyph and word masks, for draw.py
        code = Measurer(self.fonts.code, monospace=True)
        self._m = {"header": Measurer(self.fonts.header), "text": Measurer(self.fonts.body), "code": code, "wrap": code,
                   "ref": code, "handle": Measurer(self.fonts.handle)}

    def chain(self, style: Style) -> FontChain:
        return self._m[style].chain

    def measure(self, style: Style) -> Callable[[str], float]:
        """The width in px of a run drawn in `style`."""
        return self._m[style].width

    def text_top(self, style: Style) -> int:
        """Where a line's text is drawn, in px below the top of its line (the drawing's anchor)."""
        cfg = self.config
        if style == "header":
            return (cfg.header_height - cfg.header_size) // 2 - 1
        if style == "handle":
            return (cfg.handle_height - cfg.handle_size) // 2
        return (cfg.line_height - cfg.font_size) // 2

    def ink_bottom(self, style: Style) -> int:
        """How far below the top of its line a line's glyphs can reach: underscores and descenders
        hang below the line pitch (by 2 px at the defaults), and a fallback face may reach further."""
        if style == "rule":
            return self.config.line_height // 2
        reach = max(sum(face.font.getmetrics()) for face in self.chain(style).faces)
        return self.text_top(style) + reach + self.config.stroke

    def source(self, block: Block) -> list[str]:
        """The source lines a block draws (`paragraphs`), a numbered listing's gutter made
        compact in code laid out as a program (`codewrap.gutter`)."""
        return self._source(block)[0]

    def listing(self, block: Block) -> bool:
        """Whether a block is drawn as a numbered listing, its gutter compact (`source`)."""
        return self._source(block)[1]

    def _source(self, block: Block) -> tuple[list[str], bool]:
        cfg = self.config
        if block.style != "code" or not cfg.program:
            return paragraphs(block.text, cfg.tab_width), False
        listing = codewrap.gutter(_source_lines(block.text), cfg.tab_width)
        paras = paragraphs("\n".join(listing) if listing is not None else block.text, cfg.tab_width)
        numbered = listing is not None
        return (codewrap.compact_indent(paras, numbered) if cfg.compact_indent else paras), numbered

    def shown(self, para: str, style: Style) -> str:
        """A source line of a block in `style` as it is drawn before it wraps: what cannot be drawn
        shown as `displayable` makes it, and, where code is laid out as a program, its runs of rule
        characters shorter where it would wrap (`codewrap.fit_runs`)."""
        m = self._m[style]
        shown = displayable(para, m.chain)
        if self.config.program and style in ("code", "text"):
            shown = codewrap.fit_runs(shown, m.width, self.config.text_width)
        return shown

    def lines(self, block: Block) -> list[Line]:
        """The lines of one block, each with its drawn text and height."""
        cfg, m = self.config, self._m[block.style]
        paras = paragraphs(block.text, cfg.tab_width)
        max_w = cfg.text_width
        if block.style == "header":
            head = displayable(" ".join(paras), m.chain)
            return [Line(self._truncate(head, m, max_w), "header", cfg.header_height)]
        if block.style == "code" and cfg.compact_json and (items := json_items(block.text)) is not None:
            shown = [displayable(i, m.chain) for i in items]
            return [Line(t, "code", cfg.line_height) for t in wrap_items(shown, m, max_w)]
        program = block.style == "code" and cfg.program
        paras, listing = self._source(block)
        half = cfg.line_height // 2
        out: list[Line] = []
        for para in paras:
            if not para:
                out.append(Line("", block.style, half))
            elif is_rule(para):
                out.append(Line(RULE, "rule", half))
            else:
                shown = self.shown(para, block.style)
                if program:
                    out.extend(Line(t, "wrap" if more else "code", cfg.line_height)
                               for t, more in codewrap.wrap(shown, m.width, max_w, listing))
                else:
                    wrap = wrap_code if block.style == "code" else wrap_prose
                    out.extend(Line(t, block.style, cfg.line_height) for t in wrap(shown, m, max_w))
        return out

    @staticmethod
    def _truncate(text: str, m: Measurer, max_w: float) -> str:
        if m.width(text) <= max_w:
            return text
        while text and m.width(text + ELLIPSIS) > max_w:
            text = text[: max(1, len(text) * 9 // 10) - 1] if len(text) > 40 else text[:-1]
        return text + ELLIPSIS
