"""The reflex model's file: an `.npz` (a zip of arrays, loaded with `allow_pickle=False`) holding
each layer's ternary weights packed four to a byte, per-channel scales and biases, an optional
character language model, and a JSON `meta` that says what the layers are.

A file is checked for meaning, not only for format, before any of it is used: its size and what
it inflates to, every field's type and range, that the layers chain (each one's input is the
last one's output, the last gives one class per character and CTC's blank), and that every
number is finite. A file that fails is a ReflexError naming the field, never a raw exception at
read time, a page read as nothing, or memory spent on a zip bomb.
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from optictx.errors import ConfigError, OptictxError

CHARSET = "".join(chr(c) for c in range(0x20, 0x7F))  # printable ASCII; class 0 is CTC's blank
HEIGHT = 16  # px a line is scaled to
FORMAT = "optictx-reflex/1"

# Bounds far above the shipped model (1.3 MB inflated, 9 layers of at most 96 x 96 x 3 weights).
MAX_FILE_BYTES = 64 * 2**20
MAX_INFLATED_BYTES = 256 * 2**20
MAX_LAYERS = 64
MAX_WEIGHTS = 2**24  # per layer
MAX_KERNEL = 15
MAX_POOL = 8
MAX_DILATION = 64
MAX_SCALE = 1e4


class ReflexError(OptictxError):
    """A reflex model file is missing, damaged, of another format, or says something it cannot
    mean (the message names the field)."""


def pack_ternary(w: np.ndarray) -> np.ndarray:
    """-1/0/+1 values as 2-bit codes (0, 1, 2), four to a byte."""
    codes = (np.asarray(w, dtype=np.int8).ravel() + 1).astype(np.uint8)
    codes = np.concatenate([codes, np.ones(-len(codes) % 4, dtype=np.uint8)])
    q = codes.reshape(-1, 4)
    return (q[:, 0] | (q[:, 1] << 2) | (q[:, 2] << 4) | (q[:, 3] << 6)).astype(np.uint8)


def unpack_ternary(packed: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    n = math.prod(shape)
    codes = np.stack([(packed >> s) & 3 for s in (0, 2, 4, 6)], axis=1).ravel()[:n]
    if codes.max(initial=0) > 2:
        raise ReflexError("a ternary weight holds a code that is not -1, 0 or +1")
    return (codes.astype(np.float32) - 1.0).reshape(shape)


def save(path: str | Path, layers: list[dict[str, Any]], meta: dict[str, Any], lm: np.ndarray | None = None) -> None:
    """Write a model: each layer's `ternary` (-1/0/+1 ints), per-output-channel `scale` and
    `bias`, and optionally the character language model (`char_lm`)."""
    arrays: dict[str, np.ndarray] = {} if lm is None else {"lm": np.asarray(lm, dtype=np.float16)}
    specs = []
    for i, layer in enumerate(layers):
        t = np.asarray(layer["ternary"])
        if not np.isin(t, (-1, 0, 1)).all():
            raise ConfigError(f"layer {i}: weights must be -1, 0 or +1")
        arrays[f"w{i}"] = pack_ternary(t)
        arrays[f"s{i}"] = np.asarray(layer["scale"], dtype=np.float16)
        arrays[f"b{i}"] = np.asarray(layer["bias"], dtype=np.float16)
        spec = {k: v for k, v in layer.items() if k not in ("ternary", "scale", "bias")}
        specs.append({**spec, "shape": list(t.shape)})
    body = {"widen": 1.0, **meta, "format": FORMAT, "layers": specs, "charset": CHARSET, "height": HEIGHT}
    arrays["meta"] = np.frombuffer(json.dumps(body).encode("utf-8"), dtype=np.uint8)
    np.savez_compressed(path, **arrays)


# -- reading ------------------------------------------------------------------------------------

def _arrays(source: Path) -> tuple[bytes, dict[str, np.ndarray]]:
    """The file's bytes and arrays, its sizes checked before anything is inflated."""
    try:
        if source.stat().st_size > MAX_FILE_BYTES:
            raise ReflexError(f"{source}: {source.stat().st_size} bytes; a reflex model is at most {MAX_FILE_BYTES}")
        data = source.read_bytes()
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            inflated = sum(i.file_size for i in z.infolist())
        if inflated > MAX_INFLATED_BYTES:
            raise ReflexError(f"{source}: inflates to {inflated} bytes; a reflex model holds at most "
                              f"{MAX_INFLATED_BYTES}")
        with np.load(io.BytesIO(data), allow_pickle=False) as f:
            return data, {k: f[k] for k in f.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ReflexError(f"{source}: not a readable reflex model ({exc})") from None


def _int(where: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ReflexError(f"{where}: a whole number from {low} to {high}, got {value!r:.60}")
    return value


def _number(where: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ReflexError(f"{where}: a number from {low:g} to {high:g}, got {value!r:.60}")
    return float(value)


def _flag(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ReflexError(f"{where}: true or false, got {value!r:.60}")
    return value


def _vector(arrays: dict[str, np.ndarray], name: str, length: int, bound: float) -> np.ndarray:
    """A float array of `length` finite values within +-bound."""
    v = arrays.get(name)
    if v is None:
        raise ReflexError(f"{name}: missing")
    if v.dtype.kind != "f" or v.shape != (length,):
        raise ReflexError(f"{name}: {length} floats (one per output channel), got {v.dtype} {v.shape}")
    v = v.astype(np.float32)
    if not np.isfinite(v).all() or np.abs(v).max(initial=0) > bound:
        raise ReflexError(f"{name}: every value finite and within +-{bound:g}")
    return v


def _layer(i: int, spec: Any, arrays: dict[str, np.ndarray], channels: int, height: int
           ) -> tuple[dict[str, Any], int, int]:
    """Layer i checked against what comes into it (channels, rows left); itself with its
    weights, and what goes out."""
    at = f"layers[{i}]"
    if not isinstance(spec, dict):
        raise ReflexError(f"{at}: an object")
    kind = spec.get("kind")
    if kind not in ("conv2d", "conv1d"):
        raise ReflexError(f"{at}.kind: conv2d or conv1d, got {kind!r:.60}")
    shape = spec.get("shape")
    dims = 4 if kind == "conv2d" else 3
    if not isinstance(shape, list) or len(shape) != dims:
        raise ReflexError(f"{at}.shape: {dims} sizes for a {kind}")
    out, inp, *kernel = (_int(f"{at}.shape[{j}]", n, 1, MAX_WEIGHTS) for j, n in enumerate(shape))
    if any(k > MAX_KERNEL or k % 2 == 0 for k in kernel) or (kind == "conv2d" and kernel[0] != kernel[1]):
        raise ReflexError(f"{at}.shape: an odd kernel of at most {MAX_KERNEL}" + (", square" if dims == 4 else ""))
    if math.prod(shape) > MAX_WEIGHTS:
        raise ReflexError(f"{at}.shape: {math.prod(shape)} weights; a layer holds at most {MAX_WEIGHTS}")
    if kind == "conv1d" and height > 1:  # the rows left fold into channels
        channels, height = channels * height, 1
    if inp != channels:
        raise ReflexError(f"{at}.shape[1]: {inp} input channels, but {channels} come in")
    pool = spec.get("pool")
    if pool is not None:
        if not isinstance(pool, list) or len(pool) != 2:
            raise ReflexError(f"{at}.pool: null or [rows, frames]")
        pool = [_int(f"{at}.pool[{j}]", p, 1, MAX_POOL) for j, p in enumerate(pool)]
        if pool[0] > height:
            raise ReflexError(f"{at}.pool: pools {pool[0]} rows of {height}")
        height //= pool[0]
    residual = _flag(f"{at}.residual", spec.get("residual", False))
    if residual and (kind != "conv1d" or out != inp):
        raise ReflexError(f"{at}.residual: only a conv1d with as many outputs as inputs adds its input")
    checked = {**spec, "pool": pool, "residual": residual, "relu": _flag(f"{at}.relu", spec.get("relu", False)),
               "dilation": _int(f"{at}.dilation", spec.get("dilation", 1), 1, MAX_DILATION)}
    packed = arrays.get(f"w{i}")
    if packed is None or packed.dtype != np.uint8 or packed.shape != (-(-math.prod(shape) // 4),):
        raise ReflexError(f"w{i}: {math.prod(shape)} ternary weights packed four to a byte")
    scale = _vector(arrays, f"s{i}", out, MAX_SCALE)
    bias = _vector(arrays, f"b{i}", out, MAX_SCALE)
    w = unpack_ternary(packed, shape) * scale.reshape((-1,) + (1,) * (dims - 1))
    return {**checked, "w": w, "b": bias}, out, height


def read(source: Path) -> tuple[list[dict[str, Any]], dict[str, Any], np.ndarray | None, bytes]:
    """(layers with their weights, meta, language model or None, the file's bytes), all checked."""
    data, arrays = _arrays(source)
    try:
        meta = json.loads(bytes(arrays.pop("meta")).decode("utf-8"))
    except (KeyError, ValueError, TypeError) as exc:
        raise ReflexError(f"{source}: damaged reflex model (meta: {type(exc).__name__})") from None
    try:
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            found = meta.get("format") if isinstance(meta, dict) else meta
            raise ReflexError(f"format {found!r:.60}, this optictx reads {FORMAT}")
        if meta.get("charset", CHARSET) != CHARSET:
            raise ReflexError("charset: the printable ASCII characters, in order")
        height = _int("height", meta.get("height", HEIGHT), 4, 64)
        _number("widen", meta.get("widen", 1.0), 0.25, 4.0)
        specs = meta.get("layers")
        if not isinstance(specs, list) or not 1 <= len(specs) <= MAX_LAYERS:
            raise ReflexError(f"layers: a list of 1 to {MAX_LAYERS} layers")
        layers, channels, rows = [], 1, height
        for i, spec in enumerate(specs):
            layer, channels, rows = _layer(i, spec, arrays, channels, rows)
            if layers and layers[-1]["kind"] == "conv1d" and layer["kind"] == "conv2d":
                raise ReflexError(f"layers[{i}].kind: a conv2d after the rows were folded into channels")
            layers.append(layer)
        frames = math.prod(layer["pool"][1] for layer in layers if layer["pool"])
        if frames != 2:  # the reader keeps ceil(width / 2) frames of each line
            raise ReflexError(f"layers: the pools divide a line's width by {frames}; a frame is 2 px")
        if layers[-1]["kind"] != "conv1d" or channels != len(CHARSET) + 1:
            raise ReflexError(f"layers[{len(specs) - 1}]: the last is a conv1d giving {len(CHARSET) + 1} classes "
                              f"(the characters and CTC's blank), got {channels}")
        lm = arrays.get("lm")
        if lm is not None:
            if lm.shape != (len(CHARSET) + 1, len(CHARSET) + 1) or lm.dtype.kind != "f":
                raise ReflexError(f"lm: a language model of shape {(len(CHARSET) + 1,) * 2}, got {lm.shape}")
            lm = lm.astype(np.float32)
            if np.isnan(lm).any() or (lm > 0).any():
                raise ReflexError("lm: log-probabilities (at most 0, never NaN)")
    except ReflexError as exc:
        raise ReflexError(f"{source}: {exc}") from None
    return layers, meta, lm, data
