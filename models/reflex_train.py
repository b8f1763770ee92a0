"""Training of the reflex reader (reflex.py): lines drawn by optictx itself, at every tier and
column layout, from generated text (prose-like words, code, logs, JSON, hex and numbers) that
shares nothing with the evaluation corpora; quantization-aware, so the weights it saves are
ternary. Seeded: the same seed, data size and steps give the same weights.

    optictx train-reader --out reflex.npz [--pages 60] [--steps 12000] [--minutes 50] [--seed 0]
"""

from __future__ import annotations

import json
import math
import random
import string
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from optictx import Memory, RenderConfig
from optictx.handles import key_for
from optictx.progress import each
from optictx.renderers import line_boxes
from optictx.tiers import IMAGE_TIERS

from .ctc import char_lm
from .reflex import CHARSET, WIDEN, batch_of, line_input
from .reflexfile import save

TIERS = tuple(t for t in IMAGE_TIERS if t.name != "GUNDAM")  # GUNDAM's master is LARGE's: the same lines

# -- text that is not in the evaluation set ------------------------------------------------------

_WORDS = str.split("the a of to and in is it that for on with as was at by this be from or are an not have which "
          "one you were all we when there can been has more if will would so what out up about into than "
          "its them only some could time these two may then do first any new very my now such like our "
          "over man me even most made after also did many before must through back years where much your "
          "way well down should because each just those people how too little state good very make world "
          "still own see men work long get here between both life being under never day same another know "
          "while last might us great old year off come since against go came right used take three")
_SYLLABLES = str.split("ka ri to mu sen do la vor pe tri an os el ic um ber gan fi lo ne qua zu ix yo wer stra pol "
              "den mar tis ul ok")
_CODE = str.split("def class return import from self None True False if elif else for while in not and or lambda "
         "yield with as try except raise assert print len range dict list str int")


def _word(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.55:
        w = rng.choice(_WORDS)
    elif r < 0.85:
        w = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4)))
    else:  # letters the lists above seldom have (j, q, x, z ...) come from here
        w = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 9)))
    r = rng.random()
    return w.capitalize() if r < 0.12 else w.upper() if r < 0.15 else w


def _dressed(rng: random.Random, w: str) -> str:
    """A word as prose dresses it: a comma or a full stop after it, quotes or brackets around it,
    a hyphen to the next, an apostrophe, now and then a stray symbol."""
    r = rng.random()
    if r < 0.12:
        return w + ","
    if r < 0.16:
        return w + rng.choice([".", ";", ":", "!", "?"])
    if r < 0.20:
        q = rng.choice(["'", '"', "`", "(", "[", "{", "<", "*", "_"])
        return q + w + {"(": ")", "[": "]", "{": "}", "<": ">"}.get(q, q)
    if r < 0.24:
        return w + rng.choice(["-", " -", " --", "/", "'s", "'t", "n't"])
    if r < 0.27:
        return rng.choice(string.punctuation) + w
    return w


def _ident(rng: random.Random) -> str:
    parts = [_word(rng).lower() for _ in range(rng.randint(1, 3))]
    return "_".join(parts) if rng.random() < 0.6 else parts[0] + "".join(p.capitalize() for p in parts[1:])


def _number(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.3:
        return str(rng.randint(1_000_000, 9_999_999))
    if kind < 0.5:
        return f"{rng.uniform(-1000, 1000):.{rng.randint(1, 4)}f}"
    if kind < 0.7:
        return "".join(rng.choice("0123456789abcdef") for _ in range(rng.choice((7, 8, 12, 16, 40))))
    return str(rng.randint(0, 10 ** rng.randint(1, 6)))


def _prose(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randint(1, 6)):
        words = [_dressed(rng, _number(rng) if rng.random() < 0.06 else _word(rng)) for _ in range(rng.randint(4, 18))]
        sentence = " ".join(words)
        out.append(sentence[0].upper() + sentence[1:] + rng.choice(".....!?;:"))
    return " ".join(out)


def _code(rng: random.Random) -> str:
    lines = []
    depth = 0
    for _ in range(rng.randint(3, 20)):
        kind = rng.random()
        ind = "    " * depth
        if kind < 0.2:
            lines.append(f"{ind}def {_ident(rng)}({', '.join(_ident(rng) for _ in range(rng.randint(0, 3)))}):")
            depth = min(depth + 1, 3)
        elif kind < 0.35:
            lines.append(f"{ind}{rng.choice(_CODE)} {_ident(rng)} {rng.choice('=<>!+-*/%')}= {_number(rng)}")
        elif kind < 0.5:
            lines.append(f"{ind}{_ident(rng)}[{rng.randint(0, 99)}] = {{'{_ident(rng)}': {_number(rng)}}}")
        elif kind < 0.55:
            lines.append(f"{ind}{_rule(rng)}")
        elif kind < 0.6 and depth:
            depth -= 1
            lines.append(f"{ind}return {_ident(rng)}({_ident(rng)}) # {_prose(rng)[:40]}")
        else:
            lines.append(f"{ind}{_ident(rng)}.{_ident(rng)}({rng.choice(string.punctuation)}{_number(rng)}"
                         f"{rng.choice(string.punctuation)}, \"{_word(rng)}\")")
    return "\n".join(lines)


def _rule(rng: random.Random) -> str:
    """Runs of one glyph, as test runners, diffs and docstrings draw them: rules of '=', triple
    quotes, closing brackets."""
    glyph = rng.choice("=-_*#~.+<>)(]['\"`|/ ")
    run = glyph * rng.randint(2, 40)
    r = rng.random()
    if r < 0.4:
        return f"{run} {_prose(rng)[: rng.randint(5, 30)]} {glyph * rng.randint(2, 40)}"
    if r < 0.6:
        return f'{"    " * rng.randint(0, 2)}"""{_prose(rng)[: rng.randint(5, 40)]}"""'
    if r < 0.8:
        depth = rng.randint(2, 4)
        return "".join(f"{_ident(rng)}(" for _ in range(depth)) + _number(rng) + ")" * depth
    return run


def _log(rng: random.Random) -> str:
    lines = []
    for _ in range(rng.randint(2, 15)):
        ts = f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
        path = "/".join(_ident(rng) for _ in range(rng.randint(1, 4)))
        lines.append(f"{ts} {rng.choice(['INFO', 'WARN', 'ERROR', 'DEBUG'])} [{_number(rng)}] /{path}.py:"
                     f"{rng.randint(1, 999)} {_prose(rng)[:rng.randint(10, 60)]} id={_number(rng)}")
        if rng.random() < 0.3:
            lines.append(_rule(rng))
    return "\n".join(lines)


def _json(rng: random.Random) -> str:
    def value(depth: int) -> Any:
        r = rng.random()
        if depth < 2 and r < 0.25:
            return {_ident(rng): value(depth + 1) for _ in range(rng.randint(1, 4))}
        if depth < 2 and r < 0.35:
            return [value(depth + 1) for _ in range(rng.randint(1, 4))]
        if r < 0.6:
            return _number(rng)
        if r < 0.7:
            return rng.choice([True, False, None])
        return " ".join(_word(rng) for _ in range(rng.randint(1, 5)))

    return json.dumps({_ident(rng): value(0) for _ in range(rng.randint(2, 8))}, indent=rng.choice([None, 2]))


def synthetic_turns(n: int, seed: int) -> list[dict[str, Any]]:
    """`n` OpenAI-style turns of generated text: users and assistants in prose, tool results of
    code, logs and JSON (each drawn as optictx draws such turns)."""
    rng = random.Random(seed)
    turns: list[dict[str, Any]] = []
    for _ in range(n):
        r = rng.random()
        if r < 0.45:  # users' headers too: real sessions have as many as assistants'
            turns.append({"role": rng.choice(["user", "user", "assistant"]), "content": _prose(rng)})
        else:
            call = rng.choice(["call_", "toolu_", "call-"]) + "".join(
                rng.choice("0123456789abcdef") for _ in range(rng.choice((4, 12, 12, 24))))
            body = rng.choice([_code, _log, _json])(rng)
            turns.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": call, "type": "function", "function": {"name": _ident(rng), "arguments": _json(rng)}}]})
            turns.append({"role": "tool", "tool_call_id": call, "content": body})
    return turns


# -- lines drawn by optictx ---------------------------------------------------------------------

@dataclass
class Lines:
    """Line inputs (uint8, HEIGHT px tall, ink 255) with their exact text."""

    images: list[np.ndarray]
    texts: list[str]
    tiers: list[str]


def drawn_lines(pages: int, seed: int, *, columns: tuple[int, ...] = (3, 3, 2, 1)) -> Lines:
    """Lines of about `pages` pages of generated text, cut out at every image tier, with jitter a
    real pipeline meets: the box a pixel off, a horizontal stretch, the tier's own downscale."""
    rng = random.Random(seed)
    out = Lines([], [], [])
    per_layout = max(1, pages // len(columns))
    for k, cols in enumerate(columns):
        # A key from the seed: the pages' handles, drawn on them, are part of the data.
        mem = Memory(keep_recent=0, render=RenderConfig(columns=cols), key=key_for(f"reflex {seed} {k}"))
        turns = synthetic_turns(40 * per_layout, seed * 1000 + k)
        for t in turns:
            mem.add(t)
            if sum(p.sealed for p in mem.pages) >= per_layout:
                break
        for page in [p for p in mem.pages if p.sealed][:per_layout]:
            texts = [lb.text for lb in line_boxes(page.lines, mem.layout)]
            for tier in TIERS:
                image = mem.images.at(page, tier)
                for box, text in zip(mem.images.boxes(page, tier), texts):
                    if not text or not all(ch in CHARSET for ch in text) or not text.strip():
                        continue
                    dy = rng.choice((-1, 0, 0, 1))
                    box = (box[0], max(0, box[1] + dy), box[2], min(image.height, box[3] + dy))
                    x = line_input(image, box, stretch=WIDEN * rng.uniform(0.92, 1.12))
                    if x is None:
                        continue
                    out.images.append((x * 255).astype(np.uint8))
                    out.texts.append(text)
                    out.tiers.append(tier.name)
    return out


# -- the network --------------------------------------------------------------------------------

def ternary(w: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """w as -1/0/+1 times its per-output-channel mean magnitude, with a straight-through gradient."""
    scale = w.abs().mean(dim=dims, keepdim=True).clamp(min=1e-8)
    q = (w / scale).round().clamp(-1, 1) * scale
    return w + (q - w).detach()


class TConv(nn.Module):
    """A convolution whose weights are ternary in the forward pass, then batch norm."""

    def __init__(self, cin: int, cout: int, k: int, dim: int, dilation: int = 1) -> None:
        super().__init__()
        conv = nn.Conv2d if dim == 2 else nn.Conv1d
        self.conv = conv(cin, cout, k, padding=dilation * (k // 2), dilation=dilation, bias=True)
        self.norm = (nn.BatchNorm2d if dim == 2 else nn.BatchNorm1d)(cout)
        self.dims = (1, 2, 3) if dim == 2 else (1, 2)
        self.fn = torch.nn.functional.conv2d if dim == 2 else torch.nn.functional.conv1d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = ternary(self.conv.weight, self.dims)
        return self.norm(self.fn(x, w, self.conv.bias, padding=self.conv.padding, dilation=self.conv.dilation))


@dataclass(frozen=True)
class Layer:
    kind: str  # "conv2d" (3x3 over the line) or "conv1d" (over frames, the height folded into channels)
    cin: int
    cout: int
    k: int
    relu: bool = True
    pool: tuple[int, int] | None = None
    residual: bool = False
    dilation: int = 1


# The architecture; reflex.py runs the same list from the file's layer specs. The dilated
# residual layers see +-14 frames (+-28 px, three to four characters): runs of the same glyph
# ('"""', '=====') are counted from their neighbours, which a narrower view cannot do.
ARCH: tuple[Layer, ...] = (
    Layer("conv2d", 1, 16, 3, pool=(2, 2)),
    Layer("conv2d", 16, 32, 3, pool=(2, 1)),
    Layer("conv2d", 32, 48, 3, pool=(2, 1)),
    Layer("conv1d", 96, 96, 1),
    Layer("conv1d", 96, 96, 3, residual=True),
    Layer("conv1d", 96, 96, 3, residual=True, dilation=2),
    Layer("conv1d", 96, 96, 3, residual=True, dilation=4),
    Layer("conv1d", 96, 96, 3, residual=True, dilation=8),
    Layer("conv1d", 96, len(CHARSET) + 1, 1, relu=False),
)


class ReflexNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(TConv(a.cin, a.cout, a.k, 2 if a.kind == "conv2d" else 1, a.dilation)
                                    for a in ARCH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer, a in zip(self.layers, ARCH):
            if a.kind == "conv1d" and x.dim() == 4:
                x = x.reshape(x.shape[0], -1, x.shape[3])
            y = layer(x)
            x = x + y if a.residual else y
            if a.relu:
                x = torch.relu(x)
            if a.pool:
                x = torch.nn.functional.max_pool2d(x, a.pool)
        return x.permute(2, 0, 1).log_softmax(2)  # (frames, n, classes), as CTCLoss takes it

    def export(self) -> list[dict[str, Any]]:
        """Each layer's ternary weights, with its scale and batch norm folded into a per-channel
        scale and bias (what reflex.save writes)."""
        out = []
        for layer, a in zip(self.layers, ARCH):
            w = layer.conv.weight.detach().double()
            s = w.abs().mean(dim=layer.dims, keepdim=True).clamp(min=1e-8)
            t = (w / s).round().clamp(-1, 1)
            bn = layer.norm
            scale = bn.weight.detach().double() / torch.sqrt(bn.running_var.double() + bn.eps)
            bias = (layer.conv.bias.detach().double() - bn.running_mean.double()) * scale + bn.bias.detach().double()
            out.append({"kind": a.kind, "relu": a.relu, "pool": list(a.pool) if a.pool else None,
                        "residual": a.residual, "dilation": a.dilation, "ternary": t.to(torch.int8).numpy(),
                        "scale": (s.flatten() * scale).numpy(), "bias": bias.numpy()})
        return out


# -- training -----------------------------------------------------------------------------------

def _batches(lines: Lines, size: int, rng: random.Random) -> Iterator[tuple[np.ndarray, list[str]]]:
    """Batches of similar widths (less padding), in a shuffled order, forever."""
    order = sorted(range(len(lines.texts)), key=lambda i: lines.images[i].shape[1])
    groups = [order[i : i + size] for i in range(0, len(order), size)]
    while True:
        rng.shuffle(groups)
        for g in groups:
            yield batch_of([lines.images[i].astype(np.float32) / 255.0 for i in g]), [lines.texts[i] for i in g]


def _augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Gamma, contrast and a slight blur, per line (ink is 1, paper 0)."""
    n = x.shape[0]
    gamma = torch.exp(torch.empty(n, 1, 1, 1).uniform_(-0.35, 0.35, generator=gen))
    contrast = torch.empty(n, 1, 1, 1).uniform_(0.75, 1.0, generator=gen)
    x = x.clamp(0, 1) ** gamma * contrast
    blur = torch.rand(n, 1, 1, 1, generator=gen) < 0.25
    soft = torch.nn.functional.avg_pool2d(x, 3, stride=1, padding=1)
    return torch.where(blur, 0.5 * x + 0.5 * soft, x)


def train(lines: Lines, *, steps: int, seed: int, minutes: float | None = None, batch: int = 32,
          max_lr: float = 3e-3, log: Any = print) -> ReflexNet:
    """Train on `lines` for `steps` steps (or until `minutes` run out), seeded."""
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    net = ReflexNet()
    opt = torch.optim.AdamW(net.parameters(), lr=max_lr, weight_decay=1e-4)
    ctc = nn.CTCLoss(blank=0, zero_infinity=True)
    index = {ch: i + 1 for i, ch in enumerate(CHARSET)}
    start = time.monotonic()
    net.train()
    for step, (x, texts) in zip(range(steps), each(_batches(lines, batch, rng), "training", "step", total=steps)):
        # Warm up, then a cosine down to nothing, over the steps or the minutes, whichever ends
        # first (a run cut short by time still anneals: what it saves is a finished model).
        done = step / steps if minutes is None else max(step / steps, (time.monotonic() - start) / (60 * minutes))
        if done >= 1:
            log(f"stopped at step {step}: {minutes} minutes are up")
            break
        for group in opt.param_groups:
            group["lr"] = max_lr * min(1.0, done / 0.05) * 0.5 * (1 + math.cos(math.pi * done))
        inp = _augment(torch.from_numpy(x), gen)
        logp = net(inp)
        targets = torch.tensor([index[ch] for t in texts for ch in t], dtype=torch.long)
        frames = torch.full((len(texts),), logp.shape[0], dtype=torch.long)
        loss = ctc(logp, targets, frames, torch.tensor([len(t) for t in texts], dtype=torch.long))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 5.0)
        opt.step()
        if step % 200 == 0:
            log(f"step {step}/{steps} loss {loss.item():.3f} lr {opt.param_groups[0]['lr']:.2e}")
    net.eval()
    return net


def run(out: str | Path, *, pages: int = 60, steps: int = 12_000, minutes: float | None = None, seed: int = 0,
        threads: int | None = None, log: Any = print) -> Path:
    """Draw the lines, train, write the model to `out`; the path written."""
    if threads:
        torch.set_num_threads(threads)
    t0 = time.monotonic()
    lines = drawn_lines(pages, seed)
    log(f"{len(lines.texts)} lines from {pages} pages in {time.monotonic() - t0:.0f} s")
    net = train(lines, steps=steps, seed=seed, minutes=minutes, log=log)
    save(out, net.export(), {"seed": seed, "pages": pages, "steps": steps, "widen": WIDEN,
                             "trained_s": round(time.monotonic() - t0)},
         lm=char_lm(lines.texts))
    log(f"wrote {out} ({Path(out).stat().st_size / 1024:.0f} KiB) in {time.monotonic() - t0:.0f} s")
    return Path(out)
