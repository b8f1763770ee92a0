"""Readers turn a page image back into text, to measure what a consumer can still see.

`TesseractReader` is the independent reader (Tesseract 5, Debian package tesseract-ocr). The
readers issue extends this module (line-box reading, VLM readers, caching, parallelism).
"""

from __future__ import annotations

import shutil
from typing import Protocol

from PIL import Image

from .errors import OptictxError


class ReaderError(OptictxError):
    """A reader is missing or failed."""


class Reader(Protocol):
    def read(self, image: Image.Image) -> str: ...


class TesseractReader:
    """Tesseract via pytesseract. Small tiers are upscaled first (`upscale`), as Tesseract wants
    ~20 px glyphs; the information is still only what the small image holds."""

    def __init__(self, *, upscale_to: int = 1920, psm: int = 6, lang: str = "eng") -> None:
        if shutil.which("tesseract") is None:
            raise ReaderError("the tesseract binary is not installed: apt-get install tesseract-ocr")
        try:
            import pytesseract
        except ImportError as exc:
            raise ReaderError("pytesseract is not installed: pip install 'optictx[eval]'") from exc
        self._tess = pytesseract
        self.upscale_to, self.psm, self.lang = upscale_to, psm, lang

    def read(self, image: Image.Image) -> str:
        if image.width < self.upscale_to:
            side = self.upscale_to
            image = image.resize((side, side * image.height // image.width), Image.Resampling.LANCZOS)
        return self._tess.image_to_string(image, lang=self.lang, config=f"--psm {self.psm}")


# OCR engines "typeset" what they read: curly quotes and dashes for straight ones. That is the
# reader's habit, not lost information, so both sides are folded before comparing.
_TYPOGRAPHY = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2018": "'", "\u2019": "'",
                             "\u2014": "-", "\u2013": "-", "\u00ab": '"', "\u00bb": '"'})


def normalize(text: str) -> str:
    """Whitespace runs collapsed (layout is not content) and typographic quotes/dashes folded."""
    return " ".join(text.translate(_TYPOGRAPHY).split())


def char_accuracy(truth: str, read: str) -> float:
    """1 - normalized Levenshtein distance between `normalize`d texts."""
    from rapidfuzz.distance import Levenshtein

    a, b = normalize(truth), normalize(read)
    if not a:
        return 1.0 if not b else 0.0
    return 1.0 - Levenshtein.distance(a, b) / max(len(a), len(b))
