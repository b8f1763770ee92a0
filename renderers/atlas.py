"""Glyphs drawn once and pasted after: the renderer's fast path for ASCII lines.

FreeType lays out and rasterises every `draw.text` call from scratch, so drawing was most of what
building a page cost. Pillow puts every glyph on a whole pixel, at the pen position (in 1/64 px:
advances plus kerning) rounded, and a glyph's pixels do not depend on where it lands. So each
(face, character) is rasterised once, each pair's kerning measured once, and a line is its
glyphs' masks placed where a whole-line layout would put them, blended in order as Pillow blends
glyphs into one mask, and pasted through once. Words, which repeat, are kept
assembled. The pixels are the same as `draw.text`'s (tested pixel for pixel on every corpus and
on random text); lines this does not cover (other scripts, fallback faces, stroked glyphs) are
drawn by Pillow as before.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
from PIL import Image, ImageFont

# A word's ink and where it sits: rows x cols (None: blank), x and y offsets in px from the
# whole pixel below the pen, and its advance in 1/64 px.
Ink = tuple["np.ndarray | None", int, int, int]


class Face:
    """One font's glyph masks, advances and pair kerning, all in FreeType's 1/64 px."""

    def __init__(self, font: ImageFont.FreeTypeFont) -> None:
        self.font = font
        self._glyphs: dict[str, Ink] = {}
        self._kern: dict[str, int] = {}

    def _len64(self, s: str) -> int:
        return round(self.font.getlength(s) * 64)

    def glyph(self, ch: str) -> Ink:
        hit = self._glyphs.get(ch)
        if hit is None:
            im, (dx, dy) = self.font.getmask2(ch, "L")
            w, h = im.size
            ink = np.frombuffer(bytes(im), np.uint8).reshape(h, w) if w and h else None
            hit = self._glyphs[ch] = (ink, dx, dy, self._len64(ch))
        return hit

    def kern(self, a: str, b: str) -> int:
        pair = a + b
        k = self._kern.get(pair)
        if k is None:
            k = self._kern[pair] = self._len64(pair) - self.glyph(a)[3] - self.glyph(b)[3]
        return k

    def word(self, word: str, frac: int) -> Ink:
        """`word` drawn with its pen starting `frac`/64 px past a whole pixel; its advance excludes
        the kerning with whatever follows it."""
        placed, pen, prev = [], frac, ""
        for ch in word:
            if prev:
                pen += self.kern(prev, ch)
            ink, dx, dy, advance = self.glyph(ch)
            if ink is not None:
                placed.append((((pen + 32) >> 6) + dx, dy, ink))
            pen += advance
            prev = ch
        return (*_combine(placed), pen - frac)


def _over(under: np.ndarray, ink: np.ndarray) -> None:
    """`ink` laid over `under` in place, as Pillow blends a glyph into a text mask: where both
    have ink, ink + under * (255 - ink) / 255 with Pillow's own rounding."""
    both = (ink > 0) & (under > 0)
    if both.any():
        tmp = under.astype(np.uint16) * (255 - ink.astype(np.uint16)) + 128
        blended = np.minimum(ink + (((tmp >> 8) + tmp) >> 8), 255).astype(np.uint8)
        np.copyto(under, np.where(both, blended, np.maximum(under, ink)))
    else:
        np.maximum(under, ink, out=under)  # no overlap: each pixel is one glyph's


def _combine(placed: list[tuple[int, int, np.ndarray]]) -> tuple[np.ndarray | None, int, int]:
    """Masks at (x, y) offsets, in drawing order, as one mask and its offset."""
    if not placed:
        return None, 0, 0
    x0, y0 = min(p[0] for p in placed), min(p[1] for p in placed)
    out = np.zeros((max(p[1] + p[2].shape[0] for p in placed) - y0,
                    max(p[0] + p[2].shape[1] for p in placed) - x0), np.uint8)
    right = x0  # masks are placed left to right: one that starts past every earlier one lands on blank
    for x, y, ink in placed:
        h, w = ink.shape
        region = out[y - y0 : y - y0 + h, x - x0 : x - x0 + w]
        if x >= right:
            region[...] = ink
        else:
            _over(region, ink)
        right = max(right, x + w)
    return out, x0, y0


class GlyphInk:
    """Per font, its `Face`; and an LRU of assembled words bounded by bytes. Thread-safe: pages are
    drawn from worker threads."""

    def __init__(self, max_bytes: int = 8 * 2**20) -> None:
        self.max_bytes, self.bytes = max_bytes, 0
        self._faces: dict[int, Face] = {}
        self._words: OrderedDict[tuple[int, str, int], Ink] = OrderedDict()
        self._lock = threading.Lock()

    def _word(self, face: Face, word: str, frac: int) -> Ink:
        key = (id(face), word, frac)
        hit = self._words.get(key)
        if hit is not None:
            self._words.move_to_end(key)
            return hit
        hit = self._words[key] = face.word(word, frac)
        self.bytes += hit[0].nbytes if hit[0] is not None else 0
        while self.bytes > self.max_bytes and len(self._words) > 1:
            old = self._words.popitem(last=False)[1][0]
            self.bytes -= old.nbytes if old is not None else 0
        return hit

    def draw(self, img: Image.Image, xy: tuple[int, int], text: str, font: ImageFont.FreeTypeFont) -> None:
        """Draw an ASCII line in black with its top left at `xy`, as `draw.text` anchors it."""
        with self._lock:
            face = self._faces.get(id(font))
            if face is None or face.font is not font:
                face = self._faces[id(font)] = Face(font)
            placed, pen, prev = [], 0, ""  # pen: the next glyph's origin, before its kerning
            for i, word in enumerate(text.split(" ")):
                if i:  # the space before this word
                    pen += (face.kern(prev, " ") if prev else 0) + face.glyph(" ")[3]
                    prev = " "
                if not word:
                    continue
                if prev:
                    pen += face.kern(prev, word[0])
                ink, dx, dy, advance = self._word(face, word, pen & 63)
                if ink is not None:
                    placed.append(((pen >> 6) + dx, dy, ink))
                pen += advance
                prev = word[-1]
        line, x0, y0 = _combine(placed)
        if line is not None:
            img.paste(0, (xy[0] + x0, xy[1] + y0), Image.fromarray(line))
