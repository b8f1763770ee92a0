"""Legibility gate: never send a page at a tier its reader cannot read.

For each sealed page the gate reads the page back, least sharp tier first, and keeps the first
tier whose character error rate is within the threshold: the page's *floor*. The scheduler then
never sends the page below its floor; where the ladder or the budget asks for less, the page is
sent at its floor (or as text, when even the sharpest image fails or costs more than the text),
and budget fitting drops it rather than blur it further. Tiers sharper than a legible one are
taken as legible too, so a page costs one read when its smallest tier passes.

    mem = Memory(gate=LegibilityGate(TesseractReader(), max_cer={Tier.TINY: 0.03, Tier.SMALL: 0.01}))
    mem = Memory(gate=LegibilityGate(ReflexReader(), max_cer=0.1))  # optictx.models: 20x faster

Findings are cached by page digest, and a Memory stores them beside its pages under the gate's
`key` (the reader's `identity` and the thresholds): a reopened memory does not read again.

Off by default: even the reflex reader's reads cost more than the rest of an agent loop's turn
(BENCHMARKS.md, "Legibility gate").
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import ConfigError
from .images import PageImages
from .packer import Page
from .readers import Reader, char_accuracy
from .tiers import Tier

GATED_TIERS = (Tier.TINY, Tier.SMALL, Tier.BASE, Tier.LARGE)  # least sharp first: the reading order


class LegibilityGate:
    """The least sharp legible tier of each page, from a reader and a CER threshold per tier."""

    def __init__(self, reader: Reader, max_cer: float | Mapping[Tier, float] = 0.02) -> None:
        limits = dict(max_cer) if isinstance(max_cer, Mapping) else dict.fromkeys(GATED_TIERS, max_cer)
        bad = [t for t, v in limits.items() if t not in GATED_TIERS or not 0 <= v <= 1]
        if bad:
            raise ConfigError(f"max_cer needs a rate in [0, 1] for tiers among {[t.value for t in GATED_TIERS]}; "
                             f"got {bad}")
        self.reader = reader
        self.max_cer = limits  # a tier left out is not checked: taken as legible
        self.reads = 0  # page reads done, for tests and benchmarks
        self.cer: dict[tuple[str, Tier], float] = {}  # (page digest, tier) -> measured error rate
        self.confidence: dict[tuple[str, Tier], float] = {}  # the same, the reader's own confidence
        self._floors: dict[str, Tier] = {}
        self._lock = threading.Lock()

    @property
    def key(self) -> str | None:
        """Names what the floors depend on (the reader, its weights and settings, the thresholds),
        for storing them beside the pages; None when the reader does not say what it is
        (`identity`): then nothing is stored."""
        identity = getattr(self.reader, "identity", None)
        if not isinstance(identity, str):
            return None
        limits = sorted((t.value, v) for t, v in self.max_cer.items())
        return hashlib.sha256(json.dumps([identity, limits]).encode()).hexdigest()[:24]

    def floors(self, pages: Sequence[Page], images: PageImages) -> list[Tier]:
        """Each page's floor (cached by digest). Pages still to measure are read in one batch per
        tier, the reader's workers in parallel."""
        with self._lock:
            todo = {p.digest: p for p in pages if p.digest not in self._floors}
            for tier in GATED_TIERS:
                if not todo:
                    break
                limit = self.max_cer.get(tier)
                if limit is None:  # not checked: every page still open takes this tier
                    self._floors.update(dict.fromkeys(todo, tier))
                    break
                batch = list(todo.values())
                self.reads += len(batch)
                for page, (text, confidence) in zip(batch, self._read(batch, images, tier)):
                    cer = self.cer[page.digest, tier] = 1.0 - char_accuracy(page.text, text)
                    if confidence is not None:
                        self.confidence[page.digest, tier] = confidence
                    if cer <= limit:
                        self._floors[page.digest] = tier
                        del todo[page.digest]
            self._floors.update(dict.fromkeys(todo, Tier.TEXT))  # no image tier reads well enough
            return [self._floors[p.digest] for p in pages]

    def _read(self, pages: list[Page], images: PageImages, tier: Tier) -> list[tuple[str, float | None]]:
        scored = getattr(self.reader, "read_scored", None)  # a reader that knows how sure it is
        if scored is None:
            return [(text, None) for text in images.read(self.reader, pages, tier)]
        return [scored(images.at(p, tier), images.boxes(p, tier)) for p in pages]

    def measured(self, digest: str) -> dict[str, Any] | None:
        """What was found for the page `digest`: its floor, and per tier read the error rate and
        (where the reader gives one) its confidence; None if it was not read yet."""
        floor = self._floors.get(digest)
        if floor is None:
            return None
        tiers = [t for t in GATED_TIERS if (digest, t) in self.cer]
        return {"floor": floor.value,
                "cer": {t.value: round(self.cer[digest, t], 5) for t in tiers},
                "confidence": {t.value: round(self.confidence[digest, t], 5)
                               for t in tiers if (digest, t) in self.confidence}}

    def remember(self, found: Mapping[str, str]) -> set[str]:
        """Take in findings stored earlier (`measured`, as JSON, per page digest); the digests
        taken. Bodies that do not parse are left out: those pages are read again."""
        taken = set()
        with self._lock:
            for digest, body in found.items():
                try:
                    data = json.loads(body)
                    floor = Tier(data["floor"])
                    cer = {Tier(t): float(v) for t, v in data["cer"].items()}
                    conf = {Tier(t): float(v) for t, v in data.get("confidence", {}).items()}
                except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
                    continue
                self._floors[digest] = floor
                self.cer.update({(digest, t): v for t, v in cer.items()})
                self.confidence.update({(digest, t): v for t, v in conf.items()})
                taken.add(digest)
        return taken
