"""CTC for the reflex reader (`reflex.py`): decoding a line's per-frame log-probabilities into
text (best path, or a prefix beam search with a character bigram model), scoring a text under
them (the line's confidence), and fusing readings of one line at several stretches. numpy; torch's
`ctc_loss` for scoring where torch is installed."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .reflexfile import CHARSET


def torch_or_none() -> Any:
    """torch, where it is installed (an optional speed-up: every kernel has a numpy path)."""
    try:
        import torch
    except ImportError:
        return None
    return torch



def best_path(logp: np.ndarray) -> str:
    """The most likely class per frame, repeats merged, blanks dropped."""
    best = logp.argmax(axis=1)
    keep = (best != 0) & np.concatenate([[True], best[1:] != best[:-1]])
    return "".join(CHARSET[c - 1] for c in best[keep])


def greedy(logp: np.ndarray) -> tuple[str, float]:
    """The best path, with the line's confidence (see `confidence`)."""
    text = best_path(logp)
    return text, confidence(logp, text)


def char_lm(texts: Sequence[str]) -> np.ndarray:
    """A character bigram model of `texts`: log P(next | previous) over the classes, row 0 for a
    line's start (add-one smoothed). Small (96 x 96) and blind to words, on purpose: agent
    traffic is identifiers, hex and numbers, where a stronger prior would overrule the pixels."""
    index = {ch: i + 1 for i, ch in enumerate(CHARSET)}
    counts = np.ones((len(CHARSET) + 1, len(CHARSET) + 1))
    counts[:, 0] = 0.0  # the blank is never a next character
    for text in texts:
        prev = 0
        for ch in text:
            c = index.get(ch)
            if c is not None:
                counts[prev, c] += 1
                prev = c
    with np.errstate(divide="ignore"):
        return np.log(counts / counts.sum(axis=1, keepdims=True))


def beam(logp: np.ndarray, *, width: int = 8, prune: float = -12.0, lm: np.ndarray | None = None,
         alpha: float = 0.0) -> list[tuple[str, float]]:
    """CTC prefix beam search: the `width` most likely texts with their log-probabilities, best
    first (an n-best list: the right reading is often second when the first is wrong). Classes
    below `prune` (log) in a frame are not tried there. With a language model (`char_lm`) each
    character also scores `alpha` times its log-probability after the one before (shallow
    fusion); the scores returned are the pixels' alone."""
    # prefix -> (log P ending in blank, log P ending in its last character); and its LM score
    beams: dict[str, tuple[float, float]] = {"": (0.0, -math.inf)}
    prior: dict[str, float] = {"": 0.0}
    use_lm = lm is not None and alpha > 0
    for frame in logp:
        tried = np.flatnonzero(frame > prune)
        nxt: dict[str, list[float]] = {}
        add = _adder(nxt)
        for prefix, (pb, pc) in beams.items():
            total = np.logaddexp(pb, pc)
            last = CHARSET.index(prefix[-1]) + 1 if prefix else 0
            for c in tried:
                p = float(frame[c])
                if c == 0:
                    add(prefix, total + p, -math.inf)
                    continue
                ch = CHARSET[c - 1]
                if c == last:
                    add(prefix + ch, -math.inf, pb + p)  # a repeat needs a blank between
                    add(prefix, -math.inf, pc + p)  # the same character, held
                else:
                    add(prefix + ch, -math.inf, total + p)
                if use_lm and prefix + ch not in prior:
                    prior[prefix + ch] = prior[prefix] + alpha * float(lm[last, c])  # type: ignore[index]
        ranked = sorted(nxt.items(), key=lambda kv: -(np.logaddexp(*kv[1]) + prior.get(kv[0], 0.0)))[:width]
        beams = {k: (v[0], v[1]) for k, v in ranked}
    ranked = sorted(beams.items(), key=lambda kv: -(np.logaddexp(*kv[1]) + prior.get(kv[0], 0.0)))
    return [(k, float(np.logaddexp(*v))) for k, v in ranked]


def _adder(into: dict[str, list[float]]) -> Any:
    def add(prefix: str, blank: float, char: float) -> None:
        cur = into.setdefault(prefix, [-math.inf, -math.inf])
        cur[0], cur[1] = np.logaddexp(cur[0], blank), np.logaddexp(cur[1], char)

    return add


def ctc_logprob(logp: np.ndarray, text: str) -> float:
    """log P(text | frames) by the CTC forward algorithm (every alignment, not only the best)."""
    labels = [CHARSET.index(ch) + 1 for ch in text if ch in CHARSET]
    ext = [0]
    for c in labels:
        ext += [c, 0]
    s, t = len(ext), logp.shape[0]
    if t < len(labels):
        return -math.inf
    alpha = np.full(s, -np.inf)
    alpha[0] = logp[0, 0]
    if s > 1:
        alpha[1] = logp[0, ext[1]]
    ext_a = np.array(ext)
    skip = np.zeros(s, dtype=bool)
    skip[2:] = (ext_a[2:] != 0) & (ext_a[2:] != ext_a[:-2])
    prev1, prev2 = np.full(s, -np.inf), np.full(s, -np.inf)
    for f in range(1, t):
        prev1[1:] = alpha[:-1]
        prev2[2:] = np.where(skip[2:], alpha[:-2], -np.inf)
        alpha = np.logaddexp(np.logaddexp(alpha, prev1), prev2) + logp[f, ext_a]
    return float(np.logaddexp(alpha[-1], alpha[-2]) if s > 1 else alpha[-1])


def ctc_logprobs(logp: np.ndarray, texts: Sequence[str], frames: Sequence[int]) -> np.ndarray:
    """`ctc_logprob` for a batch at once: logp (n, frames, classes), each line's text and frames.
    By torch's `ctc_loss` where torch is installed (its C++ loop is 10x faster than numpy's)."""
    labels = [[CHARSET.index(ch) + 1 for ch in t if ch in CHARSET] for t in texts]
    torch = torch_or_none()
    if torch is None or not labels:
        return _ctc_logprobs_numpy(logp, labels, frames)
    flat = torch.tensor([c for lab in labels for c in lab], dtype=torch.long)
    loss = torch.nn.functional.ctc_loss(
        torch.from_numpy(np.ascontiguousarray(logp.transpose(1, 0, 2))), flat,
        torch.tensor(list(frames), dtype=torch.long), torch.tensor([len(lab) for lab in labels], dtype=torch.long),
        reduction="none", zero_infinity=False)
    return -loss.double().numpy()


def _ctc_logprobs_numpy(logp: np.ndarray, labels: Sequence[Sequence[int]], frames: Sequence[int]) -> np.ndarray:
    n = len(labels)
    s = 2 * max((len(lab) for lab in labels), default=0) + 1
    ext = np.zeros((n, s), dtype=np.int64)
    for i, lab in enumerate(labels):
        ext[i, 1 : 2 * len(lab) : 2] = lab
    size = np.array([2 * len(lab) + 1 for lab in labels])
    valid = np.arange(s)[None, :] < size[:, None]
    skip = np.zeros((n, s), dtype=bool)
    skip[:, 2:] = (ext[:, 2:] != 0) & (ext[:, 2:] != ext[:, :-2])
    emit = np.take_along_axis(logp, np.broadcast_to(ext[:, None, :], (n, logp.shape[1], s)), axis=2)
    alpha = np.full((n, s), -np.inf)
    alpha[:, 0] = emit[:, 0, 0]
    alpha[:, 1:2] = np.where(size[:, None] > 1, emit[:, 0, 1:2], -np.inf) if s > 1 else alpha[:, 1:2]
    last = np.array(frames)
    prev1, prev2 = np.full((n, s), -np.inf), np.full((n, s), -np.inf)
    for f in range(1, logp.shape[1]):
        prev1[:, 1:] = alpha[:, :-1]
        prev2[:, 2:] = np.where(skip[:, 2:], alpha[:, :-2], -np.inf)
        step = np.logaddexp(np.logaddexp(alpha, prev1), prev2) + emit[:, f]
        alpha = np.where(valid & (f < last)[:, None], step, alpha)
    rows = np.arange(n)
    end = alpha[rows, size - 1]
    before = np.where(size > 1, alpha[rows, np.maximum(size - 2, 0)], -np.inf)
    out = np.logaddexp(end, before)
    return np.where(last >= np.array([len(lab) for lab in labels]), out, -np.inf)


def confidence(logp: np.ndarray, text: str) -> float:
    """P(text | frames) per character, geometric mean, from the CTC forward probability: 1.0 for
    a line read without doubt, lower the more other readings compete."""
    lp = ctc_logprob(logp, text)
    return float(math.exp(lp / max(1, len(text))))


def align(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Dynamic time warping of two readings of one line, (frames, classes) log-probabilities
    each, `b` drawn wider: for each frame of `a`, the frame of `b` it matches. The path is
    monotone, runs from first frames to last, and moves 0, 1 or 2 frames of `b` per frame of `a`;
    a frame pair costs the cross-entropy of `b`'s classes under `a`'s."""
    cost = -(np.exp(a) @ b.T)
    ta, tb = cost.shape
    total = np.full(tb, np.inf)
    total[0] = cost[0, 0]
    moves = np.zeros((ta, tb), dtype=np.int8)
    cols = np.arange(tb)
    for i in range(1, ta):
        options = np.stack([total, np.r_[np.inf, total[:-1]], np.r_[np.inf, np.inf, total[:-2]]])
        moves[i] = options.argmin(axis=0)
        total = cost[i] + options[moves[i], cols]
    j = tb - 1 if np.isfinite(total[-1]) else int(np.argmin(total))  # b too long to reach: its best end
    path = np.empty(ta, dtype=np.int64)
    for i in range(ta - 1, -1, -1):
        path[i] = j
        j -= int(moves[i, j])
    return path


def fuse(first: np.ndarray, *others: np.ndarray) -> np.ndarray:
    """The readings of one line at several stretches as one: each other reading's frames aligned
    to the first's (`align`), the log-probabilities averaged and normalised again."""
    if not others:
        return first
    mean = first + sum(o[align(first, o)] for o in others)
    mean = mean / (1 + len(others))
    return mean - np.logaddexp.reduce(mean, axis=1, keepdims=True)
