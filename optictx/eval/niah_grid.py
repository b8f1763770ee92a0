"""A NIAH run's grid: its settings (`NiahConfig`, the knobs of gkamradt's harness and RULER plus
the optical memory's own), its cells, and what each cell found."""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..renderers import RenderConfig

NeedleKind = Literal["number", "uuid", "multikey", "multivalue", "multiquery", "free"]


class NiahConfig(BaseModel):
    """The knobs of gkamradt's harness and RULER, plus the optical memory's own."""

    model_config = ConfigDict(extra="forbid")

    haystack: str = Field("builtin", description="'builtin' (agent traffic), 'prose', a .txt file or folder, "
                          "or a .jsonl conversation")
    needle: NeedleKind = "number"
    needle_text: str | None = Field(None, description="free needle: the sentence to hide")
    question: str | None = Field(None, description="free needle: the question to ask")
    answer: str | None = Field(None, description="free needle: the string that must come back")
    lengths: list[int] = Field([8000, 16000, 32000, 64000], description="haystack sizes in cl100k tokens")
    depths: list[float] | int = Field(5, description="depth percents, or how many from 0 to 100")
    depth_spacing: Literal["linear", "sigmoid"] = "linear"
    budgets: list[float] = Field([0.1, 0.25], description="<= 1: a fraction of the transcript; > 1: tokens")
    vision: str = "deepseek-ocr"
    keep_recent: int = 4
    render: RenderConfig = Field(default_factory=RenderConfig, description="how pages are drawn")
    samples: int = 1
    seed: int = 0
    workers: int = Field(default_factory=lambda: os.cpu_count() or 1)
    backend: Literal["reader", "vlm"] = "reader"
    gate: float | None = Field(None, ge=0, le=1, description="max CER of a legibility gate on the reflex reader "
                               "(None: no gate)")
    base_url: str | None = None
    model: str | None = None
    api_key: str = "unused"
    out: str = "out/niah"

    def depth_percents(self) -> list[float]:
        if isinstance(self.depths, list):
            return [float(d) for d in self.depths]
        n = self.depths
        if n < 2:
            return [0.0]
        if self.depth_spacing == "linear":
            return [round(100 * i / (n - 1), 1) for i in range(n)]
        # gkamradt's sigmoid spacing: denser near both ends, where recall usually breaks
        xs = [-6 + 12 * i / (n - 1) for i in range(n)]
        return [round(100 / (1 + math.exp(-x)), 1) if 0 < i < n - 1 else float(100 * (i > 0))
                for i, x in enumerate(xs)]


@dataclass(frozen=True)
class Cell:
    length: int
    depth: float
    budget: float
    sample: int

    @property
    def name(self) -> str:
        return f"len{self.length}_depth{self.depth:g}_budget{self.budget:g}_s{self.sample}"


@dataclass
class CellResult:
    cell: Cell
    tokens: int  # transcript tokens
    budget_tokens: int
    values: list[str]
    found: list[str | None]  # per value: "page", "factsheet", "recent" or None
    tiers: list[str]  # per value: the tier its page was sent at, "recent" or "gone"
    optical: list[bool]  # per value, the context without the factsheet: read back from a page or recent text
    optical_tiers: list[str]
    truncation: list[bool]
    full_text: bool | None  # None: the transcript does not fit the budget
    context_tokens: int
    answer: str | None = None
    below_floor: int = 0  # image pages sent less sharp than the gate's floor (it promises none)

    @property
    def recall(self) -> float:
        return sum(f is not None for f in self.found) / len(self.found)

    @property
    def truncation_recall(self) -> float:
        return sum(self.truncation) / len(self.truncation)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(recall=self.recall, truncation_recall=self.truncation_recall)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CellResult:
        d = {k: v for k, v in d.items() if k not in ("recall", "truncation_recall")}
        return cls(**{**d, "cell": Cell(**d["cell"])})


@dataclass
class Results:
    config: NiahConfig
    cells: list[CellResult] = field(default_factory=list)
    paths: dict[str, Path] = field(default_factory=dict)
