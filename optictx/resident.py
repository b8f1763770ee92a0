"""What a memory keeps in RAM, rebuilt from its store: the packer with its pages, the index of
every turn taken in, the turns not on a sealed page yet, their exact strings, and the plan state
between calls. It takes in the store's new turns and makes the snapshots planning reads.
`Memory` owns one and holds its lock around every use."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from . import handles
from .budget import Budget
from .context import Context
from .cost import CostModel
from .factlines import TurnFacts
from .gate import LegibilityGate
from .images import PageImages
from .packer import Packer
from .pieces import caption
from .plan import Snapshot, overflow
from .planning import Planning
from .policy import Policy
from .renderers import Layout
from .store import Store
from .turnindex import TurnIndex
from .turns import Turn

# A conversation this small (in text tokens) is also kept whole in RAM: while it may go as it
# came, every context reads it whole, and reading it back from the store was 40% of a context()
# at 300 turns on SQLite. Beyond it (a few MB) it is read back when needed, as before.
KEPT_TOKENS = 262_144


class Resident:
    """One memory's state in RAM (its caller holds the memory's lock)."""

    def __init__(self, store: Store, layout: Layout, tokenizer: Any, tokens_per_page: int, images: PageImages,
                 gate: LegibilityGate | None, key: str) -> None:
        self._store, self._tokenizer = store, tokenizer
        self.index = TurnIndex(tokenizer)  # per-turn facts, system, pinned and in-place turns
        self.packer = Packer(layout, tokenizer, tokens_per_page, in_place=self.index.inline_ids,
                             handle=partial(handles.handle, key))
        # Sealed pages stored under this memory's packing key: a reopen need not lay them out again.
        self.packer.restore(store.load_pages(self.packer.key))
        self.recent: list[Turn] = []  # turns not on a sealed page yet
        # Exact strings of packed turns, found the first time a context images them; the turns
        # themselves are read back from the store. A turn that stays text needs none.
        self.facts = TurnFacts(store.get, skip=self.index.inline_ids)
        self.planning = Planning(store, images, gate)  # the plan state between calls
        self._transcript: list[Turn] | None = []  # every turn, while the conversation is small

    def sync(self, keep_recent: int) -> None:
        """Take in turns the store holds that this memory has not seen (other writers' too)."""
        for turn in self._store.since(self.index.last_id):
            self._ingest(turn, keep_recent)
        if self.packer.has_unsaved:
            self._store.save_pages(self.packer.key, *self.packer.unsaved())

    def _ingest(self, turn: Turn, keep_recent: int) -> None:
        recent = self.index.note(turn)
        if self._transcript is not None:
            if self.index.text_total <= KEPT_TOKENS:
                self._transcript.append(turn)
            else:
                self._transcript = None
        self.facts.note(turn)
        self.planning.note(turn)
        if recent:
            self.recent.append(turn)
            cut = overflow(self.recent, keep_recent, self.packer.restored_upto)
            for t in self.recent[:cut]:
                self.packer.add(t)
            del self.recent[:cut]

    def context(self, policy: Policy, budget: Budget, cost: CostModel, commit: bool, at: float) -> Context:
        """This call's context (`Memory.context`), planned from the last one (`Planning`)."""
        fixed = {t.id for t in (*self.index.system, *self.index.pinned)}
        return self.planning.context(partial(self.snapshot, policy), budget, cost, policy, fixed,  # type: ignore[arg-type]
                                     commit, at)

    def snapshot(self, policy: Policy, budget: Budget, cost: CostModel, recent: Sequence[Turn] | None = None
                 ) -> Snapshot:
        """This memory as planning reads it now; `recent`: these turns in place of the ones not on
        pages (prefix.py's tail)."""
        pack, index = self.packer.view(), self.index
        # The gate reads sealed pages only: unsealed ones change with every turn, and they are
        # the newest, which the ladder keeps sharpest.
        floors = tuple(self.planning.floors(pack.sealed)) if self.planning.gate else ()
        last = self.planning.last_tiers(budget, cost) if policy.sticky else ()
        # The whole transcript is read back only when its text alone fits: then it may go as it came.
        verbatim = recent is None and policy.verbatim and index.text_total <= budget.limit
        # (Other writers' turns past the last one taken in are left for the next sync.)
        transcript = None if not verbatim else tuple(
            self._transcript if self._transcript is not None else self._store.since(-1)[: index.last_id + 1])
        recent = self.recent if recent is None else recent
        inline = index.inline_before(recent[0].id if recent else index.last_id + 1)  # type: ignore[arg-type]
        tokens, images = index.of((*(transcript or ()), *index.system, *index.pinned, *inline, *recent))
        return Snapshot(system=tuple(index.system), pinned=tuple(index.pinned), recent=tuple(recent), tokens=tokens,
                        pack=pack, count=self._tokenizer.count, images=images, floors=floors, last_tiers=last,
                        facts=self.facts, transcript=transcript, text_total=index.text_total,
                        all_images=index.all_images(), inline=inline, inline_ids=frozenset(index.inline_ids),
                        caption=caption(policy.tools, pack.across is not None))
