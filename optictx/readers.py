"""Readers turn a page image back into text, to measure what a consumer can still see.

`TesseractReader` is the independent reader: Tesseract 5 in-process through tesserocr (1.4x
faster per page than the pytesseract subprocess here, 3x when OpenMP is left to oversubscribe two
cores), with the English model from Debian's `tesseract-ocr` package. The readers issue extends
this module (line-box reading, VLM readers).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from PIL import Image

from .errors import OptictxError

TESSDATA_DIRS = ("/usr/share/tesseract-ocr/5/tessdata", "/usr/share/tesseract-ocr/4.00/tessdata",
                 "/usr/share/tessdata", "/usr/local/share/tessdata")


class ReaderError(OptictxError):
    """A reader is missing or failed."""


class Reader(Protocol):
    def read(self, image: Image.Image) -> str: ...

    def read_batch(self, images: Sequence[Image.Image]) -> list[str]: ...


def find_tessdata(lang: str = "eng") -> str:
    """The folder holding `<lang>.traineddata`: $TESSDATA_PREFIX, then Debian's locations."""
    candidates = [os.environ["TESSDATA_PREFIX"]] if os.environ.get("TESSDATA_PREFIX") else []
    for folder in (*candidates, *TESSDATA_DIRS):
        if (Path(folder) / f"{lang}.traineddata").is_file():
            return folder
    raise ReaderError(f"no {lang}.traineddata found: apt-get install tesseract-ocr "
                      f"(or set TESSDATA_PREFIX to the folder that has it)")


class TesseractReader:
    """Tesseract 5 (tesserocr). Small tiers are upscaled to `upscale_to` px first, since Tesseract
    wants glyphs of ~20 px; the information is still only what the small image holds. Results are
    cached by image digest; `read_batch` runs one engine per worker thread (Tesseract releases the
    GIL while it recognises)."""

    def __init__(self, *, upscale_to: int = 1920, psm: int = 6, lang: str = "eng", workers: int | None = None,
                 cache_size: int = 4096) -> None:
        try:
            import tesserocr
        except ImportError as exc:
            raise ReaderError("tesserocr is not installed: pip install 'optictx[eval]'") from exc
        self._tesserocr = tesserocr
        self.tessdata = find_tessdata(lang)
        self.upscale_to, self.psm, self.lang = upscale_to, psm, lang
        self.workers = workers or os.cpu_count() or 1
        self._local = threading.local()
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def _api(self):  # one engine per thread: a PyTessBaseAPI is not safe to share
        api = getattr(self._local, "api", None)
        if api is None:
            api = self._tesserocr.PyTessBaseAPI(path=self.tessdata, lang=self.lang, psm=self.psm)
            self._local.api = api
        return api

    def _key(self, image: Image.Image) -> str:
        h = hashlib.sha256(f"{image.mode}{image.size}{self.upscale_to}{self.psm}{self.lang}".encode())
        h.update(image.tobytes())
        return h.hexdigest()

    def read(self, image: Image.Image) -> str:
        key = self._key(image)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        if image.width < self.upscale_to:
            side = self.upscale_to
            image = image.resize((side, side * image.height // image.width), Image.Resampling.LANCZOS)
        api = self._api()
        api.SetImage(image)
        text = api.GetUTF8Text()
        with self._lock:
            self._cache[key] = text
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return text

    def read_batch(self, images: Sequence[Image.Image]) -> list[str]:
        if self.workers == 1 or len(images) < 2:
            return [self.read(im) for im in images]
        with ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(self.read, images))


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
