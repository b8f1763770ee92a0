"""Needle in a haystack for compressed memories, with the axis only an optical memory has: which
tier the needle's page has decayed to.

A cell is (context length, depth, budget, sample). Its haystack is a conversation of about that
many tokens (built in, a text corpus or a JSONL file); RULER-style needles ("One of the special
magic numbers for {key} is: {value}.") go in at sentence boundaries of the turn at `depth` of the
transcript's tokens. The memory's context under the budget is then scored:

- `reader` backend: the page holding the needle is read by a `Reader` (Tesseract by default) at
  the tier it was sent at; text parts count as they are. A value counts when it appears
  (case-insensitive, RULER's string match), and the score says where it came through: `page`,
  `factsheet` or `recent`. The same context without the factsheet gives optical-only recall.
- `vlm` backend: the context goes through `to_openai()` with the question to an
  OpenAI-compatible endpoint, and the answer is string-matched.

Baselines in the same cell: truncation (the newest turns that fit the budget as text, the way
`trim_messages` keeps the last messages) and full text when it fits.

    optictx niah --lengths 8000 16000 --depths 5 --budgets 0.1 --out out/niah
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import sys
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from optictx.errors import ConfigError

from ..budget import Budget
from ..context import Context
from ..gate import LegibilityGate
from ..io import read_jsonl
from ..memory import Memory
from ..progress import Bar
from ..sample import prose_corpus, sample_conversation
from ..tiers import Tier
from ..tokens import get_tokenizer
from ..turnindex import text_tokens
from ..turns import Turn, to_turn
from .niah_grid import Cell, CellResult, NiahConfig, Results

WORDS = ("amber", "basalt", "cobalt", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper",
         "kestrel", "lagoon", "marble", "nectar", "onyx", "pepper", "quartz", "raven", "saffron", "tundra",
         "umber", "velvet", "willow", "xenon", "yarrow", "zephyr")
NEEDLE = "One of the special magic {what} for {key} is: {value}."
QUESTION = "What are all the special magic {what} for {keys} mentioned in the provided context?"


# -- haystacks ---------------------------------------------------------------------------------


def _text_haystack(path: Path) -> list[Turn]:
    """A text file (or a folder of .txt files) as user/assistant turns of a few paragraphs each."""
    files = sorted(path.rglob("*.txt")) if path.is_dir() else [path]
    if not files:
        raise ConfigError(f"{path}: no .txt files to build a haystack from")
    paras = [p.strip() for f in files for p in f.read_text(encoding="utf-8", errors="replace").split("\n\n")]
    paras = [p for p in paras if p]
    chunks = [" ".join(paras[i : i + 3]) for i in range(0, len(paras), 3)]
    return [Turn(role="user" if i % 2 == 0 else "assistant", content=c) for i, c in enumerate(chunks)]


def haystack(source: str, tokens: int, seed: int) -> list[Turn]:
    """About `tokens` tokens of conversation, the same for the same source and seed. Text sources
    repeat from the start when they are shorter than asked."""
    if source == "builtin":
        base = [to_turn(m) for m in sample_conversation(seed=seed, tasks=4)]
        per_task = sum(text_tokens(t, get_tokenizer()) for t in base) / 4
        pool = [to_turn(m) for m in sample_conversation(seed=seed, tasks=max(1, math.ceil(tokens / per_task) + 1))]
    elif source == "prose":  # standard-library docstrings as a chat: dense pages, few numbers
        pool = [Turn(role="user" if i % 2 == 0 else "assistant", content=c) for i, c in enumerate(prose_corpus())]
    elif source.endswith(".jsonl"):
        pool = read_jsonl(source)
    else:
        pool = _text_haystack(Path(source))
    tok, out, total = get_tokenizer(), [], 0
    while total < tokens:
        for t in pool:
            out.append(t)
            total += text_tokens(t, tok)
            if total >= tokens:
                break
        if not pool:
            raise ConfigError(f"haystack {source!r} is empty")
    return out


# -- needles -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Needles:
    sentences: list[str]  # what to hide, in order of depth
    depths: list[float]  # depth percent of each sentence
    values: list[str]  # what must come back (a subset of the sentences' values)
    question: str


def make_needles(config: NiahConfig, depth: float, rng: random.Random) -> Needles:
    """The needles of a cell: the scored one at `depth`; others (distractors or siblings) at
    random depths."""
    def key() -> str:
        return f"{rng.choice(WORDS)}-{rng.choice(WORDS)}-{rng.randint(10, 99)}"

    def value(kind: str) -> str:
        return str(uuid.UUID(int=rng.getrandbits(128), version=4)) if kind == "uuid" else str(
            rng.randint(1_000_000, 9_999_999))

    kind = config.needle
    if kind == "free":
        if not (config.needle_text and config.question and config.answer):
            raise ConfigError("a free needle needs needle_text, question and answer")
        return Needles([config.needle_text], [depth], [config.answer], config.question)
    what = "uuids" if kind == "uuid" else "numbers"
    k = key()
    if kind in ("number", "uuid"):
        v = value(kind)
        return Needles([NEEDLE.format(what=what, key=k, value=v)], [depth], [v], QUESTION.format(what=what, keys=k))
    others = [rng.uniform(0, 100) for _ in range(3)]
    if kind == "multikey":  # one asked, three distractors with other keys
        v = value("number")
        sentences = [NEEDLE.format(what=what, key=k, value=v)]
        sentences += [NEEDLE.format(what=what, key=key(), value=value("number")) for _ in others]
        return Needles(sentences, [depth, *others], [v], QUESTION.format(what=what, keys=k))
    if kind == "multivalue":  # one key, four values, all asked
        vs = [value("number") for _ in range(4)]
        return Needles([NEEDLE.format(what=what, key=k, value=v) for v in vs], [depth, *others], vs,
                       QUESTION.format(what=what, keys=k))
    keys = [k] + [key() for _ in others]  # multiquery: four keys, all asked
    vs = [value("number") for _ in keys]
    return Needles([NEEDLE.format(what=what, key=kk, value=v) for kk, v in zip(keys, vs)], [depth, *others], vs,
                   QUESTION.format(what=what, keys=", ".join(keys)))


_BOUNDARY = re.compile(r"(?<=[.!?])\s+|\n+")


def insert(turns: list[Turn], sentence: str, depth: float) -> int:
    """Hide `sentence` at the sentence boundary nearest `depth` percent of the transcript's tokens,
    in the first user or assistant turn with text at or after that point; returns its index."""
    tok = get_tokenizer()
    sizes = [text_tokens(t, tok) for t in turns]
    target, run = sum(sizes) * depth / 100, 0.0
    start = len(turns) - 1
    for i, n in enumerate(sizes):
        if run + n >= target:
            start = i
            break
        run += n
    order = [*range(start, len(turns)), *range(start - 1, -1, -1)]
    i = next((j for j in order if turns[j].role in ("user", "assistant") and isinstance(turns[j].content, str)
              and turns[j].text.strip()), None)
    if i is None:
        raise ConfigError("the haystack has no user or assistant text to hide a needle in")
    text = turns[i].text
    offset = len(text) * max(0.0, min(1.0, (target - run) / max(sizes[i], 1)))
    cuts = [0, *(m.end() for m in _BOUNDARY.finditer(text)), len(text)]
    at = min(cuts, key=lambda c: abs(c - offset))
    new = f"{text[:at]}{' ' if at and not text[at - 1].isspace() else ''}{sentence} {text[at:]}".rstrip()
    turns[i] = turns[i].model_copy(update={"content": new})
    return i


# -- scoring -----------------------------------------------------------------------------------


def _where(ctx: Context, value: str, read: Callable[[Any], str]) -> tuple[str | None, str]:
    """Where `value` comes through in `ctx` (page, factsheet, recent or None) and the tier of the
    page that drew it ("recent" or "gone" when no page in the context holds it)."""
    v = value.lower()
    page = next((s for s in ctx.pages if v in s.text.lower()), None)
    tier = page.tier.value if page is not None else "gone"
    if any(v in s.text.lower() for s in ctx.text_segments if s.kind == "recent"):
        return "recent", "recent"
    if page is not None and (not page.tier.is_image or v in read(page).lower()):
        return "page", tier
    if v in ctx.factsheet.lower():
        return "factsheet", tier
    return None, tier


def _answered(ctx: Context, value: str, answer: str) -> tuple[str | None, str]:
    """VLM backend: the value counts when the answer holds it; where it was in the context."""
    where, tier = _where(ctx, value, lambda seg: seg.text)  # what the pixels carry, not a reading
    return ((where or "answer") if value.lower() in answer.lower() else None), tier


def _truncated(turns: Sequence[Turn], budget: int) -> str:
    """The newest turns that fit `budget` tokens as text (system turns first), as one string."""
    tok = get_tokenizer()
    system = [t for t in turns if t.role == "system"]
    room = budget - sum(text_tokens(t, tok) for t in system)
    kept: list[Turn] = []
    for t in reversed([t for t in turns if t.role != "system"]):
        room -= text_tokens(t, tok)
        if room < 0:
            break
        kept.append(t)
    return "\n".join(t.text + "".join(c.function.arguments for c in t.tool_calls) for t in [*system, *kept])


_READER: Any = None


def _reader() -> Any:
    global _READER
    if _READER is None:
        from ..readers import TesseractReader

        _READER = TesseractReader(workers=1)  # one engine per worker process
    return _READER


def run_cell(config: NiahConfig, cell: Cell) -> CellResult:
    rng = random.Random(f"{config.seed}/{cell.name}")
    turns = haystack(config.haystack, cell.length, config.seed + cell.sample)
    needles = make_needles(config, cell.depth, rng)
    for sentence, depth in sorted(zip(needles.sentences, needles.depths), key=lambda p: p[1]):
        insert(turns, sentence, depth)
    tok = get_tokenizer()
    total = sum(text_tokens(t, tok) for t in turns)
    limit = round(cell.budget * total) if cell.budget <= 1 else int(cell.budget)
    # verbatim=False: the harness measures what pages keep, also where the text alone would fit.
    mem = Memory(vision=config.vision, budget=Budget(tokens=limit), keep_recent=config.keep_recent,
                 render=config.render, verbatim=False, gate=_gate(config.gate))
    for t in turns:
        mem.add(t)
    ctx = mem.context()
    below = _below_floor(mem, ctx)

    def read(seg: Any) -> str:
        return _reader().read(seg.image, seg.boxes)

    mem.factsheet = None  # optical only: the same memory, its context without the factsheet
    bare = mem.context()
    answer = None
    if config.backend == "vlm":
        answer, bare_answer = ask(ctx, needles.question, config), ask(bare, needles.question, config)
        where = [_answered(ctx, v, answer) for v in needles.values]
        optical = [_answered(bare, v, bare_answer) for v in needles.values]
    else:
        where = [_where(ctx, v, read) for v in needles.values]
        optical = [_where(bare, v, read) for v in needles.values]
    trunc = _truncated(turns, limit).lower()
    return CellResult(
        cell, total, limit, needles.values, [w[0] for w in where], [w[1] for w in where],
        [o[0] is not None for o in optical], [o[1] for o in optical],
        [v.lower() in trunc for v in needles.values], True if total <= limit else None, ctx.tokens, answer, below)


def _gate(max_cer: float | None) -> Any:
    if max_cer is None:
        return None
    from ..models import ReflexReader

    return LegibilityGate(ReflexReader(), max_cer=max_cer)


def _below_floor(mem: Memory, ctx: Context) -> int:
    """Image pages of `ctx` sent less sharp than their floor (the gate promises none)."""
    below = 0
    for seg in ctx.pages:
        found = mem.gate.measured(seg.page.digest) if mem.gate is not None and seg.tier.is_image else None
        if found and seg.tier.rank < Tier(found["floor"]).rank:
            below += 1
    return below


def ask(ctx: Context, question: str, config: NiahConfig) -> str:
    """The context and the question to an OpenAI-compatible endpoint; the answer text."""
    if not (config.base_url and config.model):
        raise ConfigError("the vlm backend needs base_url and model")
    from openai import OpenAI

    client = OpenAI(base_url=config.base_url, api_key=config.api_key, timeout=300, max_retries=2)
    messages = [*ctx.to_openai(), {"role": "user", "content": question}]
    reply = client.chat.completions.create(model=config.model, messages=messages, temperature=0, max_tokens=256)
    return reply.choices[0].message.content or ""


def _cells(config: NiahConfig) -> list[Cell]:
    return [Cell(n, d, b, s) for n in config.lengths for d in config.depth_percents() for b in config.budgets
            for s in range(config.samples)]


def run(config: NiahConfig, *, progress: bool = False) -> Results:
    """Every cell of the grid. Cells with a JSON in `out/cells` already are read back, not rerun,
    while the settings and the code that computed them are this run's (`out/cells/settings.json`)."""
    from .niah_report import write_outputs

    folder = Path(config.out) / "cells"
    folder.mkdir(parents=True, exist_ok=True)
    _forget_stale_cells(folder, config, progress)
    done, todo = {}, []
    for cell in _cells(config):
        path = folder / f"{cell.name}.json"
        if path.is_file():
            done[cell] = CellResult.from_json(json.loads(path.read_text()))
        else:
            todo.append(cell)
    bar = Bar(len(todo), "niah cells", "cell", show=progress)
    with ProcessPoolExecutor(config.workers) if config.workers > 1 and len(todo) > 1 else _Inline() as pool:
        for cell, result in zip(todo, pool.map(run_cell, [config] * len(todo), todo)):
            (folder / f"{cell.name}.json").write_text(json.dumps(result.to_json(), indent=1))
            done[cell] = result
            bar.update(1)
    bar.close()
    results = Results(config, [done[c] for c in _cells(config)])
    results.paths = write_outputs(results)
    return results


# Settings that change a cell's result without changing its name (the grid axes name it).
_GRID = {"lengths", "depths", "depth_spacing", "budgets", "samples", "workers", "out", "api_key"}


def _settings_stamp(config: NiahConfig) -> str:
    """The settings and the code that computed the cells: a cell from other ones is not this
    run's result (another needle kind, haystack or reader, or code changed since)."""
    import optictx
    from optictx import renderers  # installed inside optictx: no top-level `renderers` outside a checkout

    settings = config.model_dump(mode="json", exclude=_GRID)  # the API key stays out of files
    code = hashlib.sha256()
    for pkg in (Path(optictx.__file__).parent, Path(renderers.__file__).parent):
        for path in sorted(pkg.rglob("*.py")):
            code.update(path.relative_to(pkg).as_posix().encode() + b"\0" + path.read_bytes())
    return json.dumps({"settings": settings, "code": code.hexdigest()}, sort_keys=True)


def _forget_stale_cells(folder: Path, config: NiahConfig, progress: bool) -> None:
    """Cells are read back on the next run only while the settings and code that made them hold."""
    marker, stamp = folder / "settings.json", _settings_stamp(config)
    if marker.is_file() and marker.read_text() == stamp:
        return
    stale = [p for p in folder.glob("*.json") if p != marker]
    for p in stale:
        p.unlink()
    if stale and progress:
        print(f"{folder}: settings or code changed since its {len(stale)} cells were computed; running them again",
              file=sys.stderr)
    marker.write_text(stamp)


class _Inline:
    """A pool of one, in this process (tests, one worker, one cell)."""

    def __enter__(self) -> _Inline:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def map(self, fn: Callable[..., Any], *its: Any) -> Any:
        return map(fn, *its)
