"""Fonts: the shipped DejaVu faces plus fallbacks, and which face draws which character."""

from __future__ import annotations

import hashlib
import logging
import unicodedata
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from PIL import ImageFont

from .config import RenderConfig
from .errors import OptictxError

log = logging.getLogger(__name__)

FONT_DIR = Path(__file__).parent / "fonts"
SANS = FONT_DIR / "DejaVuSans.ttf"
SANS_BOLD = FONT_DIR / "DejaVuSans-Bold.ttf"
MONO = FONT_DIR / "DejaVuSansMono.ttf"

# Tried in order when a glyph is missing from the shipped faces. Debian packages in brackets;
# none is required: without them such characters render as the visible U+FFFD glyph.
SYSTEM_FALLBACKS = (
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",  # fonts-noto-cjk
    "/usr/share/fonts/truetype/droid/DroidSansFallbackFull.ttf",  # fonts-droid-fallback
    "/usr/share/fonts/truetype/noto/NotoSansSymbols2-Regular.ttf",  # fonts-noto-core
)

REPLACEMENT = "\ufffd"
_RTL_CLASSES = frozenset({"R", "AL", "AN"})


class FontError(OptictxError, RuntimeError):
    """A font file is missing or unreadable."""


@lru_cache(maxsize=64)
def _coverage(path: str) -> frozenset[int]:
    from fontTools.ttLib import TTFont  # only when a font is first opened

    try:
        with TTFont(path, fontNumber=0, lazy=True) as tt:
            return frozenset(tt.getBestCmap() or ())
    except Exception as exc:  # fontTools raises many types for a bad file
        raise FontError(f"cannot read font {path!r}: {exc}") from exc


@lru_cache(maxsize=64)
def _file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


@lru_cache(maxsize=256)
def _truetype(path: str, size: int, raqm: bool) -> ImageFont.FreeTypeFont:
    engine = ImageFont.Layout.RAQM if raqm else ImageFont.Layout.BASIC
    return ImageFont.truetype(path, size, layout_engine=engine)


@dataclass(frozen=True)
class Face:
    """One font file at one size; `font` draws left-to-right, `bidi` shapes RTL lines."""

    path: str
    size: int

    @property
    def font(self) -> ImageFont.FreeTypeFont:
        return _truetype(self.path, self.size, False)

    @property
    def bidi(self) -> ImageFont.FreeTypeFont:
        from PIL import features

        return _truetype(self.path, self.size, bool(features.check("raqm")))

    @property
    def covers(self) -> frozenset[int]:
        return _coverage(self.path)


@dataclass
class FontChain:
    """A primary face and its fallbacks; maps each character to the first face that has it."""

    faces: tuple[Face, ...]
    _face_of: dict[str, int] = field(default_factory=dict, repr=False)

    def face_index(self, ch: str) -> int:
        """Index of the face that draws `ch`; -1 when no face has it."""
        idx = self._face_of.get(ch)
        if idx is None:
            cp = ord(ch)
            idx = next((i for i, f in enumerate(self.faces) if cp in f.covers), -1)
            self._face_of[ch] = idx
        return idx

    def runs(self, text: str) -> list[tuple[int, str]]:
        """Split text into (face index, substring) runs; every char must be drawable."""
        out: list[tuple[int, str]] = []
        for ch in text:
            i = self.face_index(ch)
            if out and out[-1][0] == i:
                out[-1] = (i, out[-1][1] + ch)
            else:
                out.append((i, ch))
        return out


def _existing(paths: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(p for p in paths if Path(p).is_file())


@dataclass
class FontSet:
    """The chains a page uses (body, header, code, and the page's handle), built once per config."""

    body: FontChain
    header: FontChain
    code: FontChain
    digest: str
    handle: FontChain

    @classmethod
    def for_config(cls, config: RenderConfig) -> FontSet:
        return _fontset(config)


@lru_cache(maxsize=16)
def _fontset(config: RenderConfig) -> FontSet:
    for path in (SANS, SANS_BOLD, MONO):
        if not path.is_file():
            raise FontError(f"shipped font {path} is missing; reinstall optictx")
    missing = [p for p in config.fallback_fonts if not Path(p).is_file()]
    if missing:
        raise FontError(f"fallback font(s) not found: {missing}; fix RenderConfig.fallback_fonts")
    extra = config.fallback_fonts + (_existing(SYSTEM_FALLBACKS) if config.system_fallbacks else ())

    def chain(primary: Path, size: int, second: Path) -> FontChain:
        paths = (str(primary), str(second), *extra)
        return FontChain(tuple(Face(p, size) for p in paths))

    body = chain(MONO, config.font_size, SANS) if config.body_font == "mono" else chain(SANS, config.font_size, MONO)
    header = chain(SANS_BOLD, config.header_size, SANS)
    code = chain(MONO, config.font_size, SANS)
    handle = chain(MONO, config.handle_size, SANS)
    files = sorted({f.path for c in (body, header, code) for f in c.faces})
    digest = hashlib.sha256("".join(_file_digest(p) for p in files).encode()).hexdigest()[:16]
    return FontSet(body, header, code, digest, handle)


def is_rtl(text: str) -> bool:
    """True when the text holds right-to-left characters (drawn with the bidi engine)."""
    return any(unicodedata.bidirectional(ch) in _RTL_CLASSES for ch in text if ord(ch) > 0x58F)
