"""NIAH outputs: summary.csv, a heatmap per budget, recall by needle tier, and a Markdown summary."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import need
from .fidelity import pyplot, write_csv
from .niah_grid import CellResult, Results

TIER_ORDER = ("recent", "text", "gundam", "large", "base", "small", "tiny", "gone")


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("inf") if a else float("nan")


def rows(cells: Sequence[CellResult]) -> list[dict[str, Any]]:
    out = []
    for r in cells:
        found = [f for f in r.found if f is not None]
        out.append({
            "length": r.cell.length, "depth": r.cell.depth, "budget": r.cell.budget, "sample": r.cell.sample,
            "transcript_tokens": r.tokens, "budget_tokens": r.budget_tokens, "context_tokens": r.context_tokens,
            "recall": round(r.recall, 4), "optical_recall": round(sum(r.optical) / len(r.optical), 4),
            "truncation_recall": round(r.truncation_recall, 4),
            "full_text": "" if r.full_text is None else int(r.full_text),
            "ratio_vs_truncation": round(_ratio(r.recall, r.truncation_recall), 3),
            "via_page": found.count("page"), "via_factsheet": found.count("factsheet"),
            "via_recent": found.count("recent"), "needle_tiers": " ".join(r.tiers), "below_floor": r.below_floor,
        })
    return out


def by_tier(cells: Sequence[CellResult]) -> dict[str, tuple[float, float, int, int]]:
    """Tier of the needle's page -> (recall with the factsheet, optical-only recall, needles in
    each). The two contexts may send a needle's page at different tiers (the factsheet takes room)."""
    fs: dict[str, list[bool]] = defaultdict(list)
    opt: dict[str, list[bool]] = defaultdict(list)
    for r in cells:
        for found, tier in zip(r.found, r.tiers):
            fs[tier].append(found is not None)
        for optical, tier in zip(r.optical, r.optical_tiers):
            opt[tier].append(optical)

    def mean(xs: list[bool]) -> float:
        return statistics.mean(xs) if xs else float("nan")

    return {t: (mean(fs[t]), mean(opt[t]), len(fs[t]), len(opt[t])) for t in TIER_ORDER if fs.get(t) or opt.get(t)}


def write_outputs(results: Results) -> dict[str, Path]:
    out = Path(results.config.out)
    table = rows(results.cells)
    paths = {"csv": out / "summary.csv", "md": out / "summary.md", "tiers": out / "recall_by_tier.png"}
    write_csv(paths["csv"], table)
    for budget in sorted({r.cell.budget for r in results.cells}):
        name = f"heatmap_budget{budget:g}.png"
        _heatmap([r for r in results.cells if r.cell.budget == budget], out / name, budget)
        paths[f"heatmap_{budget:g}"] = out / name
    _tier_plot(results.cells, paths["tiers"])
    paths["md"].write_text(summary(results))
    return paths


def summary(results: Results) -> str:
    cfg, cells = results.config, results.cells
    lines = [f"NIAH: {cfg.needle} needles in the {cfg.haystack} haystack, {cfg.backend} backend, "
             f"vision {cfg.vision}, keep_recent {cfg.keep_recent}, {cfg.samples} sample(s), seed {cfg.seed}"
             + (f", legibility gate at {cfg.gate:.0%} CER (reflex reader): "
                f"{sum(r.below_floor for r in cells)} pages sent below their floor" if cfg.gate is not None else "")
             + ".", "",
             "| length | budget | recall (optictx) | optical only | truncation | optictx / truncation |",
             "|---:|---:|---:|---:|---:|---:|"]
    groups: dict[tuple[int, float], list[CellResult]] = defaultdict(list)
    for r in cells:
        groups[r.cell.length, r.cell.budget].append(r)
    for (length, budget), rs in sorted(groups.items()):
        rec = statistics.mean(r.recall for r in rs)
        opt = statistics.mean(sum(r.optical) / len(r.optical) for r in rs)
        tr = statistics.mean(r.truncation_recall for r in rs)
        ratio = _ratio(rec, tr)
        shown = f"{ratio:.2f}" if math.isfinite(ratio) else "-"  # truncation kept none (or neither did)
        lines.append(f"| {length} | {budget:g} | {rec:.0%} | {opt:.0%} | {tr:.0%} | {shown} |")
    lines += ["", "Recall by the tier of the needle's page (the memory's age axis):", "",
              "| needle tier | with factsheet (needles) | optical only (needles) |", "|---|---:|---:|"]
    for tier, (rec, opt, n, m) in by_tier(cells).items():
        lines.append(f"| {tier} | {_pct(rec)} ({n}) | {_pct(opt)} ({m}) |")
    return "\n".join(lines) + "\n"


def _pct(x: float) -> str:
    return "-" if x != x else f"{x:.0%}"  # NaN: no needle at that tier


def _heatmap(cells: Sequence[CellResult], path: Path, budget: float) -> None:
    LinearSegmentedColormap = need("matplotlib.colors", "eval").LinearSegmentedColormap

    plt = pyplot()
    lengths = sorted({r.cell.length for r in cells})
    depths = sorted({r.cell.depth for r in cells})
    grid = [[statistics.mean([r.recall for r in cells if r.cell.length == n and r.cell.depth == d] or [float("nan")])
             for n in lengths] for d in depths]
    cmap = LinearSegmentedColormap.from_list("niah", ["#F0496E", "#EBB839", "#0CD79F"])  # gkamradt's red -> green
    fig, ax = plt.subplots(figsize=(1.4 + 1.1 * len(lengths), 1.2 + 0.45 * len(depths)), dpi=110)
    im = ax.imshow(grid, cmap=cmap, vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(lengths)), [f"{n // 1000}k" for n in lengths])
    ax.set_yticks(range(len(depths)), [f"{d:g}%" for d in depths])
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            ax.text(j, i, f"{v:.0%}", ha="center", va="center", fontsize=8)
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("needle depth")
    label = f"{budget:.0%} of the transcript" if budget <= 1 else f"{budget:g} tokens"
    ax.set_title(f"optictx needle recall, budget {label}", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.05)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _tier_plot(cells: Sequence[CellResult], path: Path) -> None:
    plt = pyplot()
    tiers = by_tier(cells)
    names = list(tiers)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], [tiers[t][0] for t in names], 0.4, label="with factsheet")
    ax.bar([i + 0.2 for i in x], [tiers[t][1] for t in names], 0.4, label="optical only")
    ax.set_xticks(list(x), [f"{t}\n({tiers[t][2]}/{tiers[t][3]})" for t in names])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("needle recall")
    ax.set_xlabel("tier of the needle's page (needles)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
