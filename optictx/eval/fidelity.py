"""Fidelity benchmark: how much of each tier a reader can still read, at which compression.

For each text density (tokens per page, the font fitted so a page of prose is full) and each
corpus (prose, code, tool output, or any OpenAI-style JSONL conversation), full pages are rendered,
read back at every tier and scored: character accuracy on every character and on content
characters (`content`), word accuracy, exact-number recall, compression ratio (text tokens over
the consumer's image tokens, both the paper's count and the decoder positions) and seconds per
page. Writes a CSV, a Markdown table and a PNG plot beside DeepSeek-OCR's published Fox curve.

    optictx fidelity --out out/fidelity [--pages 3] [--densities 600 800 1000 1200]
                     [--corpus prose code tool path/to/session.jsonl path/to/folder]
"""

from __future__ import annotations

import csv
import inspect
import math
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..cost import CostModel, get_cost_model
from ..errors import ConfigError, ConversationFileError, need
from ..images import PageImages
from ..io import read_jsonl
from ..packer import Packer, Page
from ..progress import Bar
from ..readers import CachedReader, char_accuracy, normalize
from ..renderers import Block, Layout, RenderConfig
from ..sample import prose_corpus, sample_conversation
from ..tiers import Tier
from ..tokens import get_tokenizer
from ..turns import Turn, to_turn
from .structure import structure

# DeepSeek-OCR paper, Table 2 (Fox, 600-1300 text tokens): (compression, precision) per mode.
FOX_TINY = [(10.5, 96.5), (11.8, 93.8), (13.2, 83.8), (15.1, 85.9), (16.5, 79.3), (17.7, 76.4), (19.7, 59.1)]
FOX_SMALL = [(6.7, 98.5), (7.5, 97.3), (8.5, 96.8), (9.7, 96.8), (10.6, 91.5), (11.3, 89.8), (12.6, 87.1)]
_NUMBER = re.compile(r"\d{4,}")
# Decoration: a run of 4 or more of one rule character (- = _ ~ * # . or a box-drawing line),
# single spaces allowed between them ("- - - -"). Agent output draws rules and separators with them.
_RULE = re.compile(r"([-=_~*#.\u2500-\u257f])(?: ?\1){3,}")
BUILTIN = ("prose", "code", "tool")


def content(text: str) -> str:
    """`text` without its decoration: every rule run (`_RULE`) becomes one space. Scoring both
    the truth and the reading this way counts what a rule's length costs a reader separately
    from what the words and numbers cost."""
    return _RULE.sub(" ", text)


def content_accuracy(truth: str, read: str) -> float:
    """`char_accuracy` on content characters: decoration removed from both texts."""
    return char_accuracy(content(truth), content(read))


def _turns(texts: Sequence[str], role: str) -> list[Turn]:
    extra = {"tool_call_id": "c"} if role == "tool" else {}
    return [Turn(role=role, content=t, id=i, **extra) for i, t in enumerate(texts)]  # type: ignore[arg-type]


def agent_turns() -> list[Turn]:
    """The shipped sample conversation, as stored turns (headers, tool calls, tool output)."""
    return [to_turn(m).model_copy(update={"id": i}) for i, m in enumerate(sample_conversation())]


def jsonl_corpus(path: str | Path) -> list[Turn]:
    """The turns of one JSONL conversation, or of every `*.jsonl` in a folder one after another
    (sorted by name), numbered from 0. Errors name the file and the line."""
    path = Path(path)
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    if not files:
        raise ConversationFileError(f"{path}: no .jsonl files in the folder")
    turns = [t for f in files for t in read_jsonl(f)]
    return [t.model_copy(update={"id": i}) for i, t in enumerate(turns)]


def corpus_name(spec: str) -> str:
    """How a corpus is named in tables: the built-in name, or the file's or folder's stem."""
    return spec if spec in BUILTIN else Path(spec.rstrip("/")).stem or spec


def corpora(specs: Sequence[str] = BUILTIN) -> dict[str, list[Turn]]:
    """The corpora by name: each spec is a built-in name or a path to a JSONL file or folder."""
    builtin = _builtin() if any(s in BUILTIN for s in specs) else {}
    return {corpus_name(s): builtin[s] if s in BUILTIN else jsonl_corpus(s) for s in specs}


def _builtin() -> dict[str, list[Turn]]:
    """Offline, reproducible texts: stdlib docstrings (prose), stdlib source (code, drawn as tool
    output in monospace) and the sample conversation's tool results."""
    import json as json_mod
    import textwrap as textwrap_mod

    code = inspect.getsource(textwrap_mod) + inspect.getsource(json_mod.decoder)
    tools = [str(m["content"]) for m in sample_conversation() if m["role"] == "tool"]
    return {"prose": _turns(prose_corpus(), "user"),
            "code": _turns([code[i:i + 3000] for i in range(0, len(code), 3000)], "tool"),
            "tool": _turns(tools, "tool")}


def font_for_density(tokens_per_page: int, base: RenderConfig | None = None) -> int:
    """The largest font (8-47 px) at which `tokens_per_page` prose tokens still fit on one page."""
    return _font_for_density(tokens_per_page, base or RenderConfig())


@lru_cache(maxsize=256)
def _font_for_density(tokens_per_page: int, base: RenderConfig) -> int:
    tok, text = get_tokenizer(), "\n\n".join(prose_corpus()[:8])

    def holds(size: int) -> bool:
        cfg = base.model_copy(update={"font_size": size})
        lines = Layout(cfg).lines(Block(text))[: cfg.columns * (cfg.text_height // cfg.line_height)]
        return tok.count("\n".join(ln.text for ln in lines)) >= tokens_per_page

    lo, hi = 8, 48  # tokens per page fall as the font grows: bisect for the last size that holds
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if holds(mid) else (lo, mid)
    return lo


def full_pages(config: RenderConfig, turns: Sequence[Turn], n: int, tokens_per_page: int,
               *, skip: int = 1, spread: bool = False) -> tuple[Layout, list[Page]]:
    """`n` full pages of `turns` after the first `skip` (by default the corpus's opening page):
    the next `n`, or with `spread`, `n` spaced evenly over the whole corpus (a long session's
    pages differ from its first ones)."""
    layout = Layout(config)
    packer = Packer(layout, get_tokenizer(), tokens_per_page=tokens_per_page)
    for turn in turns:
        packer.add(turn)
        if not spread and len(packer.sealed) >= skip + n:
            break
    pages = packer.sealed[skip:]
    step = max(1, len(pages) // n) if spread else 1
    return layout, pages[::step][:n]


@dataclass(frozen=True)
class Cell:
    density: int
    font_px: int
    corpus: str
    tier: str
    pages: int
    text_tokens: float
    char_acc: float
    content_acc: float
    word_acc: float
    number_recall: float
    paper_tokens: int
    positions: int
    compression_paper: float
    compression_positions: float
    seconds_per_page: float
    # What the layout keeps of a program's shape, over all of the corpus's code (`structure.py`).
    atoms_unbroken: float = 100.0
    indent_kept: float = 100.0
    wrapped: float = 0.0


def _word_acc(truth: str, read: str) -> float:
    levenshtein = need("rapidfuzz.distance", "eval").Levenshtein
    a, b = normalize(truth).split(), normalize(read).split()
    return 1.0 - levenshtein.distance(a, b) / max(len(a), len(b), 1)


def _number_recall(truth: str, read: str) -> float:
    wanted = _NUMBER.findall(truth)
    got = set(_NUMBER.findall(read))
    return sum(1 for n in wanted if n in got) / len(wanted) if wanted else float("nan")


def measure(reader: CachedReader, *, densities: Sequence[int] = (600, 800, 1000, 1200),
            tiers: Sequence[Tier] = (Tier.BASE, Tier.SMALL, Tier.TINY), pages: int = 3,
            vision: str | CostModel = "deepseek-ocr", base: RenderConfig | None = None,
            corpus: Sequence[str] = BUILTIN) -> list[Cell]:
    """Cells for every density x corpus x tier; `base` holds the render settings but the font,
    which each density fits. No densities: `base` as it is, its font and tokens per page. A JSONL
    corpus's pages are spread over the whole conversation."""
    model, tok, texts = get_cost_model(vision), get_tokenizer(), corpora(corpus)
    base = base or RenderConfig()
    sweep = [(d, font_for_density(d, base)) for d in densities] or [(base.tokens_per_page, base.font_size)]
    cells = []
    bar = Bar(len(sweep) * len(texts) * len(tiers), "fidelity cells", "cell")
    for density, font in sweep:
        for name, turns in texts.items():
            layout, got = full_pages(base.model_copy(update={"font_size": font}), turns, pages, density,
                                     spread=name not in BUILTIN)
            if not got:
                raise ConfigError(f"corpus {name}: fills no page after its first at {density} tokens per page")
            images = PageImages(layout)
            shape = structure(turns, layout).report()
            truth = [p.text for p in got]
            n_tokens = statistics.mean(tok.count(t) for t in truth)
            for tier in tiers:
                t0 = time.perf_counter()
                read = images.read(reader, got, tier)
                secs = (time.perf_counter() - t0) / len(got)
                master = layout.config.master
                paper, pos = model.paper_tokens(tier, model.tier_size(tier, master)), model.page_tokens(tier, master)
                recall = [r for r in map(_number_recall, truth, read) if not math.isnan(r)]
                cells.append(Cell(
                    density, font, name, tier.value, len(got), round(n_tokens, 1),
                    statistics.mean(char_accuracy(t, s) for t, s in zip(truth, read)),
                    statistics.mean(content_accuracy(t, s) for t, s in zip(truth, read)),
                    statistics.mean(_word_acc(t, s) for t, s in zip(truth, read)),
                    statistics.mean(recall) if recall else float("nan"),
                    paper, pos, round(n_tokens / paper, 2), round(n_tokens / pos, 2), round(secs, 3),
                    shape["atoms_unbroken"], shape["indent_kept"], shape["wrapped"]))
                bar.update()
    bar.close()
    return cells


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Rows of equal keys as a CSV with a header (the eval outputs share it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def write_outputs(cells: Sequence[Cell], out: str | Path, reader_name: str) -> dict[str, Path]:
    out = Path(out)
    paths = {"csv": out / "fidelity.csv", "md": out / "fidelity.md", "png": out / "fidelity.png"}
    write_csv(paths["csv"], [asdict(c) for c in cells])
    rows = [f"Reader: {reader_name}; tokens: cl100k_base; compression = text tokens / image tokens "
            "(paper count, and decoder positions); content: decoration (runs of 4+ of one rule character "
            "- = _ ~ * # . or a box-drawing line) removed from both texts before scoring.", "",
            "| tokens/page (target) | font | corpus | tier | char acc | content acc | word acc | numbers "
            "| compression (paper / positions) | s/page | identifiers whole | indentation kept | lines wrapped |",
            "|---:|---:|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for c in cells:
        numbers = "-" if math.isnan(c.number_recall) else f"{c.number_recall:.0%}"  # "-": no 4+ digit numbers
        rows.append(f"| {c.text_tokens:.0f} ({c.density}) | {c.font_px} | {c.corpus} | {c.tier} | {c.char_acc:.2%} | "
                    f"{c.content_acc:.2%} | {c.word_acc:.2%} | {numbers} | "
                    f"{c.compression_paper}x / {c.compression_positions}x | {c.seconds_per_page} | "
                    f"{c.atoms_unbroken:.2f}% | {c.indent_kept:.2f}% | {c.wrapped:.1f}% |")
    paths["md"].write_text("\n".join(rows) + "\n")
    _plot(cells, paths["png"], reader_name)
    return paths


def pyplot() -> Any:
    """matplotlib.pyplot without a display (set here, at use, never at import of optictx)."""
    matplotlib = need("matplotlib", "eval")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plot(cells: Sequence[Cell], path: Path, reader_name: str) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    for (x, y), label, style in ((zip(*FOX_TINY), "DeepSeek-OCR Tiny (paper, Fox)", "k--"),
                                 (zip(*FOX_SMALL), "DeepSeek-OCR Small (paper, Fox)", "k:")):
        ax.plot(list(x), list(y), style, label=label)
    markers = iter("os^Dv<>ph*")
    for corpus in dict.fromkeys(c.corpus for c in cells):
        marker = next(markers, "x")
        for tier in sorted({c.tier for c in cells}):
            mine = [c for c in cells if c.corpus == corpus and c.tier == tier]
            pts = sorted((c.compression_paper, 100 * c.char_acc) for c in mine)
            if pts:
                ax.plot(*zip(*pts), marker=marker, label=f"optictx {corpus} {tier} ({reader_name})")
    ax.set_xlabel("compression (text tokens / paper image tokens)")
    ax.set_ylabel("character accuracy / precision (%)")
    ax.set_title("Optical compression vs legibility")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
