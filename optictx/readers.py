"""Readers turn a page image back into text, to measure what a consumer can still see.

`TesseractReader` is the independent reader: Tesseract 5 in-process through tesserocr (faster per
page than a pytesseract subprocess, no process per read), with the English model from Debian's
`tesseract-ocr` package. `RapidOcrReader` is a second, neural one whose weights ship in its wheel;
`OpenAIReader` reads through any OpenAI-compatible VLM server.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from PIL import Image

from .errors import ConfigError, OptictxError, need
from .lru import LRU

TESSDATA_DIRS = ("/usr/share/tesseract-ocr/5/tessdata", "/usr/share/tesseract-ocr/4.00/tessdata",
                 "/usr/share/tessdata", "/usr/local/share/tessdata")


class ReaderError(OptictxError):
    """A reader is missing or failed."""


Box = tuple[int, int, int, int]  # (x0, y0, x1, y1) in the image's own pixels


class Reader(Protocol):
    """`boxes`, where given, are the lines' boxes (`PageImages.boxes`): a reader may read line by
    line instead of finding the lines itself, or ignore them (a VLM reads the whole page)."""

    def read(self, image: Image.Image, boxes: Sequence[Box] | None = None) -> str: ...

    def read_batch(self, images: Sequence[Image.Image],
                   boxes: Sequence[Sequence[Box] | None] | None = None) -> list[str]: ...


_LANG = re.compile(r"[A-Za-z0-9_]{1,32}")


def find_tessdata(lang: str = "eng") -> str:
    """The folder holding `<lang>.traineddata`: $TESSDATA_PREFIX, then Debian's locations."""
    if not _LANG.fullmatch(lang):  # it becomes part of a file name: no paths, no traversal
        raise ReaderError(f"{lang!r} is not a Tesseract language name (letters, digits, _)")
    candidates = [os.environ["TESSDATA_PREFIX"]] if os.environ.get("TESSDATA_PREFIX") else []
    for folder in (*candidates, *TESSDATA_DIRS):
        if (Path(folder) / f"{lang}.traineddata").is_file():
            return folder
    raise ReaderError(f"no {lang}.traineddata found: apt-get install tesseract-ocr "
                      f"(or set TESSDATA_PREFIX to the folder that has it)")


class CachedReader:
    """Shared plumbing: a digest-keyed result cache and a thread pool for `read_batch`.
    Subclasses implement `_recognize(image, boxes) -> str` and name their settings in `_settings()`."""

    def __init__(self, *, workers: int, cache_size: int = 4096) -> None:
        self.workers = max(1, workers)
        self._cache: LRU[str, str] = LRU(max_items=cache_size)

    def _settings(self) -> str:
        raise NotImplementedError

    @property
    def identity(self) -> str:
        """What this reader is and how it is set: what it reads follows from this (the gate
        stores its floors under it)."""
        return f"{type(self).__name__}/{self._settings()}"

    def _recognize(self, image: Image.Image, boxes: Sequence[Box] | None) -> str:
        raise NotImplementedError

    def _key(self, image: Image.Image, boxes: Sequence[Box] | None) -> str:
        h = hashlib.sha256(f"{type(self).__name__}{self._settings()}{image.mode}{image.size}{boxes}".encode())
        h.update(image.tobytes())
        return h.hexdigest()

    def read(self, image: Image.Image, boxes: Sequence[Box] | None = None) -> str:
        """The text in `image` (cached by its pixels, the boxes and this reader's settings)."""
        key = self._key(image, boxes)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._recognize(image, boxes)
        return hit

    def read_batch(self, images: Sequence[Image.Image],
                   boxes: Sequence[Sequence[Box] | None] | None = None) -> list[str]:
        """`read` over many images, `workers` at a time, results in order."""
        per_image = list(boxes) if boxes is not None else [None] * len(images)
        if len(per_image) != len(images):
            raise ConfigError(f"{len(images)} images but {len(per_image)} box lists")
        if self.workers == 1 or len(images) < 2:
            return [self.read(im, b) for im, b in zip(images, per_image)]
        with ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(self.read, images, per_image))


_PAD = 12  # white border around a cut-out line, px


class TesseractReader(CachedReader):
    """Tesseract 5 (tesserocr). Small tiers are upscaled to `upscale_to` px first, since Tesseract
    wants glyphs of ~20 px; the information is still only what the small image holds. One engine
    per worker thread: Tesseract releases the GIL while it recognises, so two cores read twice
    as fast."""

    def __init__(self, *, upscale_to: int = 1920, psm: int = 6, lang: str = "eng", workers: int | None = None,
                 cache_size: int = 4096, line_boxes: bool = False) -> None:
        try:
            import tesserocr
        except ImportError as exc:
            raise ReaderError("tesserocr is not installed: pip install 'optictx[eval]'") from exc
        super().__init__(workers=workers or os.cpu_count() or 1, cache_size=cache_size)
        self._tesserocr = tesserocr
        self.tessdata = find_tessdata(lang)
        self.upscale_to, self.psm, self.lang, self.line_boxes = upscale_to, psm, lang, line_boxes
        # A line's box at TINY is 10 px on every geometry: 1920 / 512 enlarges it to 37.5.
        self.line_px = 37.5
        # Cut off the top of each line box (a share of the pitch): the line above's descenders
        # reach into it. Measured best of 0.08 and 0.15.
        self.trim = 0.15
        self._local = threading.local()

    def _settings(self) -> str:
        return (f"{self._tesserocr.tesseract_version().split()[1]}/{self.upscale_to}/{self.psm}/{self.lang}/"
                f"{self.line_boxes}/{self.trim}/{self.line_px}")

    def scale(self, image: Image.Image, boxes: Sequence[Box] | None) -> float:
        """How much to enlarge `image` before reading: to `upscale_to` px wide, or, given line
        boxes, until a line is `line_px` tall if that is more. A page drawn larger (Claude's
        2730-px pages) holds glyphs of the same size at each tier as a 1280-px page, so they are
        read at the same size whatever the page's width; for 1280-px pages the two agree."""
        scale = max(1.0, self.upscale_to / image.width)
        heights = sorted(b[3] - b[1] for b in boxes or ())
        if heights and heights[len(heights) // 2] > 0:
            scale = max(scale, self.line_px / heights[len(heights) // 2])
        return scale

    def _recognize(self, image: Image.Image, boxes: Sequence[Box] | None) -> str:
        scale = self.scale(image, boxes)
        if scale > 1.0:
            image = image.resize((round(image.width * scale), round(image.height * scale)), Image.Resampling.LANCZOS)
        api = getattr(self._local, "api", None)
        if api is None:  # one engine per thread: a PyTessBaseAPI is not safe to share
            api = self._local.api = self._tesserocr.PyTessBaseAPI(path=self.tessdata, lang=self.lang)
        if not (self.line_boxes and boxes):
            api.SetPageSegMode(self.psm)
            # One uniform block (PSM 6) reads across columns: with the boxes, each column alone.
            lefts = sorted({b[0] for b in boxes or ()})
            if len(lefts) < 2:
                api.SetImage(image)
                return api.GetUTF8Text()
            out = []
            for x in lefts:
                right = max(b[2] for b in boxes if b[0] == x)  # type: ignore[union-attr]
                api.SetImage(image.crop((max(0, round((x - 6) * scale)), 0,
                                         min(image.width, round((right + 6) * scale)), image.height)))
                out.append(api.GetUTF8Text())
            return "\n".join(out)
        # The renderer knows where every line is: read each as one line (PSM 7), skipping
        # Tesseract's own page layout analysis. Each line is cut out onto a white border (the
        # neighbours' descenders and ascenders would otherwise read as stray marks), and
        # lines without ink are not read at all.
        api.SetPageSegMode(self._tesserocr.PSM.SINGLE_LINE)
        out = []
        for x0, y0, x1, y1 in boxes:
            trim = (y1 - y0) * scale * self.trim
            crop = image.crop((round(x0 * scale), round(y0 * scale + trim), round(x1 * scale), round(y1 * scale)))
            if crop.getextrema()[0] > 160:
                out.append("")
                continue
            padded = Image.new("L", (crop.width + 2 * _PAD, crop.height + 2 * _PAD), 255)
            padded.paste(crop, (_PAD, _PAD))
            api.SetImage(padded)
            out.append(api.GetUTF8Text().strip())
        return "\n".join(out)


class RapidOcrReader(CachedReader):
    """A neural second reader: RapidOCR's PP-OCRv6 small detection and recognition models (ONNX,
    shipped inside the rapidocr wheel, run by onnxruntime: offline). With the lines' boxes it
    recognises each line, batched, without detection; without them it finds the lines itself.
    onnxruntime already spreads one batch over the cores: one worker, one engine."""

    def __init__(self, *, batch: int = 32, cache_size: int = 4096) -> None:
        try:
            import numpy as np
            from rapidocr import RapidOCR
        except ImportError as exc:
            raise ReaderError(f"rapidocr is not installed ({exc}): pip install 'optictx[eval]'") from exc
        super().__init__(workers=1, cache_size=cache_size)
        self._np = np
        self._engine = RapidOCR(params={"Global.log_level": "critical", "Rec.rec_batch_num": batch})
        self.batch = batch
        self._lock = threading.Lock()

    def _settings(self) -> str:
        return str(self.batch)

    def _bgr(self, image: Image.Image):
        return self._np.asarray(image.convert("RGB"))[:, :, ::-1]  # OpenCV's channel order

    def _recognize(self, image: Image.Image, boxes: Sequence[Box] | None) -> str:
        with self._lock:  # the engine keeps per-call settings on itself
            if not boxes:
                found = self._engine(self._bgr(image))
                return "\n".join(found.txts or ())
            crops = [image.crop(box) for box in boxes]
            inked = [i for i, c in enumerate(crops) if c.convert("L").getextrema()[0] <= 160]  # blank: not read
            texts = [""] * len(crops)
            if inked:
                read = self._engine.recognize_txt([self._bgr(crops[i]) for i in inked])
                for i, text in zip(inked, read.txts or ()):
                    texts[i] = text
            return "\n".join(texts)


# The transcription prompt each model family was trained or documented with.
OCR_PROMPTS = {
    "deepseek": "Free OCR.",  # DeepSeek-OCR / Unlimited-OCR: "<image>\nFree OCR." (the template adds <image>)
    "default": "Transcribe all the text in this image exactly, line by line, keeping numbers and ids "
               "character for character. Output only the text.",
}


class OpenAIReader(CachedReader):
    """Any OpenAI-compatible VLM server (vLLM with DeepSeek-OCR or Unlimited-OCR, GPT-4o, Qwen-VL,
    Ollama) as a reader: one chat request per image, temperature 0, with timeouts and retries."""

    def __init__(self, base_url: str, model: str, api_key: str = "unused", *, prompt: str | None = None,
                 max_tokens: int = 4096, timeout: float = 120.0, max_retries: int = 2, workers: int = 4,
                 cache_size: int = 4096) -> None:
        try:
            from openai import OpenAI, OpenAIError
        except ImportError as exc:
            raise ReaderError("the openai client is not installed: pip install openai") from exc
        super().__init__(workers=workers, cache_size=cache_size)
        self.model, self.max_tokens = model, max_tokens
        family = "deepseek" if "deepseek" in model.lower() or "unlimited" in model.lower() else "default"
        self.prompt = prompt or OCR_PROMPTS[family]
        self._client = OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries)
        self._error = OpenAIError

    def _settings(self) -> str:
        return f"{self._client.base_url}/{self.model}/{self.max_tokens}/{self.prompt}"

    def _recognize(self, image: Image.Image, boxes: Sequence[Box] | None) -> str:
        buf = io.BytesIO()  # a VLM reads the whole page: the boxes are not needed
        image.save(buf, format="PNG")
        url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
        try:
            reply = self._client.chat.completions.create(
                model=self.model, temperature=0, max_tokens=self.max_tokens,
                messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                       {"type": "text", "text": self.prompt}]}],
            )
        except self._error as exc:  # connection, status and timeout errors alike
            raise ReaderError(f"{self.model} at {self._client.base_url} failed to read an image: {exc}") from exc
        return reply.choices[0].message.content or ""


# OCR engines "typeset" what they read: curly quotes and dashes for straight ones. That is the
# reader's habit, not lost information, so both sides are folded before comparing.
_TYPOGRAPHY = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2018": "'", "\u2019": "'",
                             "\u2014": "-", "\u2013": "-", "\u00ab": '"', "\u00bb": '"'})


def normalize(text: str) -> str:
    """Whitespace runs collapsed (layout is not content) and typographic quotes/dashes folded."""
    return " ".join(text.translate(_TYPOGRAPHY).split())


def char_accuracy(truth: str, read: str) -> float:
    """1 - normalized Levenshtein distance between `normalize`d texts."""
    levenshtein = need("rapidfuzz.distance", "eval").Levenshtein
    a, b = normalize(truth), normalize(read)
    if not a:
        return 1.0 if not b else 0.0
    return 1.0 - levenshtein.distance(a, b) / max(len(a), len(b))
