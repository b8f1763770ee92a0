"""A reflex reader for optictx's own pages: a small ternary CTC line recognizer, numpy only.

optictx drew every line itself, so it knows each line's box at any tier: the reader cuts the
line out, scales it to `HEIGHT` px and reads it left to right. What it says is a floor: if a
reader trained on this very renderer cannot read a line at a tier, no general model can; what a
VLM reads there is another question.

The network (trained by `reflex_train.py`): three 3x3 convolutions with pooling fold the line's
height into channels, then 1-D convolutions over the frames, then one linear layer to the 95
printable ASCII characters and CTC's blank. Every weight is -1, 0 or +1 times a per-channel
scale, packed four to a byte; the file (`reflexfile.py`) is an `.npz` loaded with
`allow_pickle=False` and checked field by field before use.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from optictx.errors import ConfigError

from .ctc import beam, best_path, ctc_logprobs, fuse, torch_or_none
from .reflexfile import CHARSET, HEIGHT, ReflexError, read

# How much wider than HEIGHT a line is scaled: a frame is 2 input px, and at 1.0 two narrow
# glyphs in a row ("ll", "tt", "'.") get too few frames for CTC to put a blank between them
WIDEN = 1.5
WEIGHTS = "reflex.npz"  # shipped beside this module
_INK_MAX = 160  # a crop whose darkest pixel is lighter than this has no ink: not read


Box = tuple[int, int, int, int]


# -- lines --------------------------------------------------------------------------------------

def line_input(image: Image.Image, box: Box, *, height: int = HEIGHT, stretch: float = 1.0) -> np.ndarray | None:
    """The line in `box` as the network's input: float32 (height, width), ink 1 and paper 0;
    None when the crop holds no ink."""
    crop = image.crop(box).convert("L")
    if crop.width < 2 or crop.height < 2 or crop.getextrema()[0] > _INK_MAX:
        return None
    width = max(4, round(crop.width * height / crop.height * stretch))
    scaled = crop.resize((width, height), Image.Resampling.BILINEAR)
    return 1.0 - np.asarray(scaled, dtype=np.float32) / 255.0


def batch_of(lines: Sequence[np.ndarray]) -> np.ndarray:
    """Lines padded with paper to one width (a multiple of 4): float32 (n, 1, height, width)."""
    width = max(x.shape[1] for x in lines)
    width += -width % 4
    out = np.zeros((len(lines), 1, lines[0].shape[0], width), dtype=np.float32)
    for i, x in enumerate(lines):
        out[i, 0, :, : x.shape[1]] = x
    return out


class ReflexModel:
    """The network's weights as float32 arrays (ternary values times their scales), and its
    forward pass over a batch of lines."""

    def __init__(self, layers: list[dict[str, Any]], meta: dict[str, Any]) -> None:
        self.layers, self.meta = layers, meta
        self.digest = ""  # of the file it was loaded from (load)
        self.lm: np.ndarray | None = None  # log P(next class | previous class), `char_lm`
        self._tensors: list[tuple[Any, Any]] | None = None  # the weights as torch tensors, made once

    @classmethod
    def load(cls, path: str | Path | None = None) -> ReflexModel:
        """The model in `path` (an `.npz` written by `save`), the shipped one by default, checked
        field by field (`reflexfile.read`)."""
        source = Path(path) if path is not None else Path(str(resources.files(__package__) / WEIGHTS))
        layers, meta, lm, data = read(source)
        model = cls(layers, meta)
        model.lm = lm
        model.digest = hashlib.sha256(data).hexdigest()[:16]
        return model

    def logits(self, x: np.ndarray) -> np.ndarray:
        """(n, 1, height, width) lines -> (n, frames, classes) log-probabilities: by torch's CPU
        convolutions where torch is installed (about 3x faster on one core), else by numpy."""
        torch = torch_or_none()
        if torch is not None:
            return self._logits_torch(torch, x)
        return self._logits_numpy(x)

    def _logits_torch(self, torch: Any, x: np.ndarray) -> np.ndarray:
        # Every layer runs as a channels-last 2-D convolution (the 1-D ones one row high): torch's
        # CPU kernels are 2x faster so. ReLU goes after the pooling (they commute), on fewer values.
        fn, last = torch.nn.functional, torch.channels_last
        if self._tensors is None:
            self._tensors = [((w if w.ndim == 4 else w[:, :, None, :]).contiguous(memory_format=last),
                              torch.from_numpy(layer["b"]))
                             for layer in self.layers for w in [torch.from_numpy(layer["w"])]]
        with torch.no_grad():
            t = torch.from_numpy(x).contiguous(memory_format=last)
            for layer, (w, b) in zip(self.layers, self._tensors):
                if layer["kind"] == "conv2d":
                    t = fn.conv2d(t, w, b, padding=w.shape[2] // 2)
                else:
                    if t.shape[2] > 1:  # fold the remaining height into channels, channel-major
                        n, c, h, wid = t.shape
                        t = t.contiguous().reshape(n, c * h, 1, wid).contiguous(memory_format=last)
                    d = layer.get("dilation", 1)
                    y = fn.conv2d(t, w, b, padding=(0, d * (w.shape[3] // 2)), dilation=(1, d))
                    t = t + y if layer.get("residual") else y
                if layer.get("pool"):
                    t = _max_pool_torch(torch, t, *layer["pool"])
                if layer.get("relu"):
                    t = t.relu_()
            return t[:, :, 0].permute(0, 2, 1).log_softmax(2).numpy()

    def _logits_numpy(self, x: np.ndarray) -> np.ndarray:
        """The same forward pass channels-last, so that each convolution is one copy and one matmul."""
        x = x.transpose(0, 2, 3, 1)  # (n, h, w, c)
        for layer in self.layers:
            if layer["kind"] == "conv2d":
                x = _conv2d(x, layer["w"], layer["b"])
            else:
                if x.ndim == 4:  # fold the remaining height into channels (channel-major, as torch does)
                    n, h, w, c = x.shape
                    x = x.transpose(0, 2, 3, 1).reshape(n, w, c * h)
                y = _conv1d(x, layer["w"], layer["b"], layer.get("dilation", 1))
                x = x + y if layer.get("residual") else y
            if layer.get("relu"):
                x = np.maximum(x, 0.0, out=x)
            if layer.get("pool"):
                x = _pool(x, *layer["pool"])
        z = x - x.max(axis=2, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=2, keepdims=True))


def _max_pool_torch(torch: Any, t: Any, ph: int, pw: int) -> Any:
    """Max pooling of (n, c, h, w), stride = window, as maxima of strided slices: on channels-last
    tensors 3-5x faster than torch's own max_pool2d."""
    if ph > 1:
        h = t.shape[2] - t.shape[2] % ph
        t = functools.reduce(torch.maximum, [t[:, :, i:h:ph] for i in range(ph)])
    if pw > 1:
        w = t.shape[3] - t.shape[3] % pw
        t = functools.reduce(torch.maximum, [t[:, :, :, j:w:pw] for j in range(pw)])
    return t


def _pool(x: np.ndarray, ph: int, pw: int) -> np.ndarray:
    """Max pooling of a channels-last (n, h, w, c) array, stride = window."""
    h, w = x.shape[1] - x.shape[1] % ph, x.shape[2] - x.shape[2] % pw
    out = x[:, 0:h:ph, 0:w:pw]
    for i in range(ph):
        for j in range(pw):
            if i or j:
                out = np.maximum(out, x[:, i:h:ph, j:w:pw])
    return out


def _conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """k x k convolution of a channels-last (n, h, w, c) array, stride 1, zero padding that keeps
    the size: one im2col copy and one matmul."""
    n, h, wid, c = x.shape
    out_c, _, k, _ = w.shape
    p = k // 2
    padded = np.pad(x, ((0, 0), (p, p), (p, p), (0, 0)))
    cols = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(1, 2))  # n, h, w, c, k, k
    y = cols.reshape(n * h * wid, c * k * k) @ w.reshape(out_c, -1).T + b
    return y.reshape(n, h, wid, out_c)


def _conv1d(x: np.ndarray, w: np.ndarray, b: np.ndarray, dilation: int = 1) -> np.ndarray:
    """1-D convolution over frames of a channels-last (n, t, c) array, taps `dilation` apart."""
    n, t, c = x.shape
    out_c, _, k = w.shape
    if k == 1:
        return (x.reshape(n * t, c) @ w[:, :, 0].T + b).reshape(n, t, out_c)
    p = dilation * (k // 2)
    padded = np.pad(x, ((0, 0), (p, p), (0, 0)))
    span = dilation * (k - 1) + 1
    cols = np.lib.stride_tricks.sliding_window_view(padded, span, axis=1)[..., ::dilation]  # n, t, c, k
    return (cols.reshape(n * t, c * k) @ w.reshape(out_c, -1).T + b).reshape(n, t, out_c)


# -- the reader ---------------------------------------------------------------------------------

class ReflexReader:
    """The `Reader` protocol over a reflex model: `read(image, boxes)` reads each line box (the
    boxes are needed: this reader does not find lines itself). `lines(...)` also gives each
    line's confidence."""

    def __init__(self, path: str | Path | None = None, *, batch: int = 64, beam_width: int = 0,
                 lm_weight: float = 0.0, stretches: Sequence[float] = (1.0,)) -> None:
        """`beam_width` 0 decodes greedily (best path); more runs a prefix beam search that wide,
        with the model's character language model at `lm_weight` (0: none). More than one of
        `stretches` reads each line at each horizontal stretch and decodes the fused frames
        (`fuse`), at that many times the cost."""
        self.model = ReflexModel.load(path)
        if lm_weight and self.model.lm is None:
            raise ReflexError(f"lm_weight {lm_weight}: this reflex model has no language model")
        if not stretches or not all(0.5 <= s <= 2 for s in stretches):
            raise ConfigError(f"stretches must be factors in [0.5, 2]; got {list(stretches)}")
        self.batch, self.beam_width, self.lm_weight = batch, beam_width, lm_weight
        self.stretches = tuple(stretches)
        # what the gate stores floors under
        self.identity = (f"reflex/{self.model.digest}/beam{beam_width}/lm{lm_weight:g}/"
                         f"{','.join(f'{s:g}' for s in self.stretches)}")

    def frames(self, image: Image.Image, boxes: Sequence[Box], stretch: float = 1.0) -> list[np.ndarray | None]:
        """Per box, the network's (frames, classes) log-probabilities for its line drawn `stretch`
        times as wide; None for a box without ink. Lines of similar widths run as one batch."""
        meta = self.model.meta
        stretch *= meta.get("widen", 1.0)  # files written before WIDEN read at 1.0, as they were trained
        inputs = [line_input(image, b, height=meta.get("height", HEIGHT), stretch=stretch) for b in boxes]
        out: list[np.ndarray | None] = [None] * len(boxes)
        inked = sorted((i for i, x in enumerate(inputs) if x is not None), key=lambda i: inputs[i].shape[1])  # type: ignore[union-attr]
        for start in range(0, len(inked), self.batch):
            group = inked[start : start + self.batch]
            logp = self.model.logits(batch_of([inputs[i] for i in group]))  # type: ignore[misc]
            for i, lp in zip(group, logp):
                out[i] = lp[: math.ceil(inputs[i].shape[1] / 2)]  # type: ignore[union-attr]  # the line's own frames
        return out

    def lines(self, image: Image.Image, boxes: Sequence[Box], *, scored: bool = True) -> list[tuple[str, float]]:
        """(text, confidence) per box, in order; a box without ink is ("", 1.0). With `scored`
        False the confidence is not computed (1.0): a sixth of the time is its forward pass."""
        per_stretch = [self.frames(image, boxes, s) for s in self.stretches]
        logps = [None if lps[0] is None else fuse(*lps) for lps in zip(*per_stretch)]  # type: ignore[arg-type]
        inked = [i for i, lp in enumerate(logps) if lp is not None]
        if self.beam_width:
            texts = [beam(logps[i], width=self.beam_width, lm=self.model.lm, alpha=self.lm_weight)[0][0]  # type: ignore[arg-type]
                     for i in inked]
        else:
            texts = [best_path(logps[i]) for i in inked]  # type: ignore[arg-type]
        out: list[tuple[str, float]] = [("", 1.0)] * len(boxes)
        scores = np.zeros(len(inked))
        if scored and inked:
            frames = [len(logps[i]) for i in inked]  # type: ignore[arg-type]
            padded = np.zeros((len(inked), max(frames), len(CHARSET) + 1), dtype=np.float32)
            for k, i in enumerate(inked):
                padded[k, : frames[k]] = logps[i]  # type: ignore[index]
            scores = ctc_logprobs(padded, texts, frames)
        for i, text, score in zip(inked, texts, scores):
            out[i] = text, float(math.exp(score / max(1, len(text))))
        return out

    def read_scored(self, image: Image.Image, boxes: Sequence[Box]) -> tuple[str, float]:
        """The page's text and the reader's confidence in it: the geometric mean, over every
        character read, of the CTC probability of its line's reading."""
        lines = self.lines(image, _needed(boxes))
        chars = sum(len(text) for text, _ in lines)
        log_p = sum(len(text) * math.log(max(conf, 1e-300)) for text, conf in lines)
        return "\n".join(text for text, _ in lines), math.exp(log_p / chars) if chars else 1.0

    def read(self, image: Image.Image, boxes: Sequence[Box] | None = None) -> str:
        return "\n".join(text for text, _ in self.lines(image, _needed(boxes), scored=False))

    def read_batch(self, images: Sequence[Image.Image],
                   boxes: Sequence[Sequence[Box] | None] | None = None) -> list[str]:
        per_image = list(boxes) if boxes is not None else [None] * len(images)
        return [self.read(im, b) for im, b in zip(images, per_image)]


def _needed(boxes: Sequence[Box] | None) -> Sequence[Box]:
    if not boxes:
        raise ReflexError("the reflex reader reads line boxes (PageImages.boxes); it finds no lines itself")
    return boxes
