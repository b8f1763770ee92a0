"""Memory: add turns, get a context that fits the budget. The one object agents talk to."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from .budget import Budget
from .context import Context
from .cost import CostModel, get_cost_model
from .gate import LegibilityGate
from .handles import new_key
from .images import PageImages
from .packer import MAX_TOKENS_PER_PAGE, MIN_TOKENS_PER_PAGE, Page
from .policy import Policy, PolicyFields
from .promptcache import CachePricing
from .recall import Found, Recalled, recall_in, search_in
from .renderers import Layout, RenderConfig
from .report import memory_stats
from .resident import Resident
from .settings import as_budget, as_render, check_int, checked_key, reopened, stored_key, to_meta
from .store import MemoryStore, Store, open_store
from .tokens import get_tokenizer
from .tools import Tools
from .turns import Turn, to_turn
from .words import keep

DEFAULT_BUDGET = Budget(tokens=8192)


def _opened(store: str | Path | Store | None, memory: Memory) -> tuple[Store, str]:
    """The memory's store, opened, with the memory's settings written to it, and the memory's
    key (`handles.py`): the one its store keeps, else the one given, else a new one."""
    given = memory.key
    if store is None:
        return MemoryStore(), checked_key(given) or new_key()
    s = open_store(store) if isinstance(store, (str, Path)) else store
    try:
        memory.key = stored_key(s.settings(), getattr(s, "where", store), given)
        # Pages are derived data, re-packed from the turns on open: a changed render config
        # re-renders every page instead of mixing old and new pixels.
        s.set_meta(to_meta(memory))
    except BaseException:
        if isinstance(store, (str, Path)):
            s.close()
        raise
    return s, memory.key


class Memory(PolicyFields):
    """A conversation memory that fits any budget.

    Thread-safe: every public method holds the memory's lock, so threads may add and build
    contexts at once; a context is a snapshot of whole turns, never of half an `add`. Several
    processes may share one store (a SQLite file, or a PostgreSQL memory from many machines), each
    with its own Memory: ids follow one total order, and each Memory catches up with the others'
    turns on its next `add`, `context`, `len` or `pages`. Open a Memory after forking, not before
    (a database connection must not cross a fork).

    >>> mem = Memory(budget=Budget(tokens=4000), keep_recent=2)
    >>> _ = mem.add({"role": "user", "content": "hello"})
    >>> mem.context().tokens <= 4000
    True
    """

    def __init__(self, *, vision: str | CostModel = "deepseek-ocr", budget: Budget | int = DEFAULT_BUDGET,
                 keep_recent: int = 4, store: str | Path | Store | None = None, tokens_per_page: int | None = None,
                 render: RenderConfig | str | Path | None = None, tokenizer: Any = None,
                 gate: LegibilityGate | None = None, image_cache_bytes: int = 256 * 2**20,
                 policy: Policy | None = None, key: str | None = None, **policy_fields: Any) -> None:
        """`budget`: a Budget, or an int for a token budget. `key`: the secret its pages' handles
        are made with (`handles.py`; default: the one its store keeps, else a new one). `policy`:
        how contexts are planned (`Policy`); `ladder=`, `fitter=`, `factsheet=`, `limits=`,
        `sticky_tiers=` and `verbatim=` are shorthands that set those fields of it. Every setting
        is checked here: a bad one raises ConfigError naming it."""
        self.keep_recent = check_int(keep_recent, "keep_recent", 0)
        self.policy = Policy.from_kwargs(policy, policy_fields)
        self.vision = get_cost_model(vision)
        self.budget = as_budget(budget)
        self.render = as_render(render, self.vision, self.budget)
        self.tokens_per_page = self.render.tokens_per_page if tokens_per_page is None else check_int(
            tokens_per_page, "tokens_per_page", MIN_TOKENS_PER_PAGE, MAX_TOKENS_PER_PAGE)
        check_int(image_cache_bytes, "image_cache_bytes", 0)
        self.tokenizer = get_tokenizer(tokenizer)
        self.gate = gate
        self.layout = Layout(self.render)
        self.images = PageImages(self.layout, max_bytes=image_cache_bytes)
        self._lock = threading.RLock()
        self.key = key
        self._store, self.key = _opened(store, self)  # the key names its pages (`handles.py`)
        self._load()

    def _load(self) -> None:
        """(Re)build the in-memory view from the store: restored pages, then every turn replayed."""
        self._resident = Resident(self._store, self.layout, self.tokenizer, self.tokens_per_page, self.images,
                                  self.gate, self.key)
        self._sync()

    # -- persistence ------------------------------------------------------------------------

    def _sync(self) -> None:
        """Take in turns the store holds that this memory has not seen (other writers' too)."""
        self._resident.sync(self.keep_recent)

    @contextmanager
    def batch(self) -> Iterator[Memory]:
        """Group adds into one store transaction (one fsync, not one per turn).

        Turns added inside are durable when the outermost batch exits. An exception rolls the
        whole batch back, in the store and in this memory, and propagates. Other threads wait
        until the batch ends; other processes' writes wait too (up to a minute).
        """
        with self._lock:
            try:
                with self._store.batch():
                    yield self
            except BaseException:
                self._load()  # the view had taken in turns the store has just forgotten
                raise

    def close(self) -> None:
        """Close the store's file; the memory must not be used afterwards."""
        with self._lock:
            self._store.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def open(cls, path: str | Path, **overrides: Any) -> Memory:
        """Reopen a memory saved with `Memory(store=path)` (a SQLite file or a PostgreSQL URL);
        keyword arguments override its settings. A memory that does not exist is a StoreError."""
        return reopened(cls, path, overrides)

    # -- adding -------------------------------------------------------------------------------

    def add(self, turn: Turn | Mapping[str, Any], *, pin: bool = False) -> Turn:
        """Store a turn (a Turn or an OpenAI-style dict) and return it with its id.

        `pin=True` keeps the turn as text in every context (system turns always are).
        """
        t = to_turn(turn)
        t = keep(t) if self.policy.words else t  # marked as it is stored: every reopen reads the same
        if pin and not t.pinned:
            t = Turn.model_validate({**t.model_dump(), "pinned": True})  # validated: tool turns refuse pins
        self.limits.check(t)
        with self._lock:
            stored = self._store.append(t.model_copy(update={"id": None}))
            self._sync()
            return stored

    # -- reading ------------------------------------------------------------------------------

    @property
    def recent(self) -> list[Turn]:
        """Turns not on any page yet: they stay native text while the budget allows."""
        with self._lock:
            self._sync()
            return list(self._resident.recent)

    @property
    def store(self) -> Store:
        """Where its turns are kept (read it; add turns through the memory)."""
        return self._store

    def transcript(self) -> list[Turn]:
        """Every turn ever added, verbatim, in order."""
        return self._store.since(-1)

    def __len__(self) -> int:
        with self._lock:
            self._sync()
            return len(self._resident.index)

    @property
    def pages(self) -> list[Page]:
        """Sealed pages plus the open one (not sealed yet), oldest first."""
        with self._lock:
            self._sync()
            return [*self._resident.packer.sealed, *self._resident.packer.preview()]

    def recall(self, page: str, *, turns: str | int | None = None, lines: str | None = None,
               grep: str | None = None, offset: int = 0) -> Recalled:
        """The exact turns page `page` (its handle) holds, as stored: `turns` "41-45" of them (of
        one turn, `lines` "3-9"), the lines holding `grep`, from character `offset` (`recall.py`;
        RecallError otherwise)."""
        return recall_in(self.pages, self._store, page, turns=turns, lines=lines, grep=grep, offset=offset)

    def search(self, query: str, *, within: str | None = None, limit: int | None = None) -> Found:
        """The newest turns holding every term of `query` (words, exact strings, "quoted
        phrases"; any case), each with the page it is on. `within`: a page handle, checked."""
        return search_in(self.pages, self._store, query, within=within, limit=limit)

    def tools(self) -> Tools:
        """`search` and `recall` as tools for a model: their definitions in each API's shape, and
        `run(call)`, which answers a call in the shape it came in (`tools.py`)."""
        return Tools(self)

    def context(self, *, budget: Budget | int | None = None, vision: str | CostModel | None = None,
                commit: bool = True, at: float | None = None, tools: Sequence[str] | None = None,
                pricing: str | CachePricing | None = None) -> Context:
        """The conversation fitted to the budget. Raises BudgetError if even the pinned text is too big.

        With `Policy.cache` (the default) it is the last context for this budget and vision with
        the new turns appended, unless a compaction is forced or pays (`Context.event` says
        which); after the provider's cache entries expired, one that makes the prompt smaller
        always pays. `at`: the call's time (seconds since the epoch; default now). `commit=False`
        plans as this call would without recording it (a dry run). `tools`: the names the model
        calls `search` and `recall` by, said in the caption (default: `Policy.tools`). `pricing`:
        the prompt cache the context is sent to, at its model's prices (`money.for_model`), by
        which a compaction pays or not (default: `Policy.pricing`)."""
        with self._lock:
            self._sync()
            budget = self.budget if budget is None else as_budget(budget)
            cost = self.vision if vision is None else get_cost_model(vision)
            policy = self.policy if tools is None else replace(self.policy, tools=tuple(tools))
            policy = policy if pricing is None else replace(policy, pricing=pricing)
            return self._resident.context(policy, budget, cost, commit, time.time() if at is None else at)

    def legibility(self) -> list[dict[str, Any]]:
        """Per sealed page, what the legibility gate found (reading the pages it has not read
        yet): the turns on it, its floor (the least sharp tier that reads within the threshold,
        or "text"), and per tier read the character error rate and the reader's confidence."""
        with self._lock:
            self._sync()
            return self._resident.planning.legibility(self._resident.packer.view().sealed)

    def original_tokens(self, vision: str | CostModel | None = None) -> int:
        """What the whole conversation costs sent as it came, under `vision` (default: the
        memory's): no context costs more (`Policy.verbatim`)."""
        cost = self.vision if vision is None else get_cost_model(vision)
        with self._lock:
            self._sync()
            return self._resident.index.original_tokens(cost)

    def stats(self, context: Context | None = None) -> dict[str, Any]:
        """Text tokens of the whole transcript, tokens of the default context, ratio, pages per tier."""
        ctx = context or self.context()
        return memory_stats(ctx, turns=len(self), text_tokens=self._resident.index.text_total,
                            sealed=len(self._resident.packer.sealed))
