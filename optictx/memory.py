"""Memory: add turns, get a context that fits the budget. The one object agents talk to."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from .budget import Budget
from .context import CAPTION, Context, PageSegment, TextSegment
from .cost import CostModel, get_cost_model
from .errors import BudgetError
from .facts import Factsheet
from .gate import LegibilityGate
from .images import PageImages
from .limits import Limits
from .packer import Packer, Page
from .plan import Plan, cap_at, cap_images, safe_cuts
from .renderers import Layout, RenderConfig
from .schedule import AgeLadder, OldestFirst, page_costs, schedule
from .sheet import TurnFacts, with_factsheet
from .store import MemoryStore, SQLiteStore, Store
from .tiers import Tier
from .tokens import Tokenizer, get_tokenizer
from .turns import Turn, to_turn

DEFAULT_BUDGET = Budget(tokens=8192)


def turn_tokens(turn: Turn, tok: Tokenizer) -> int:
    """Text tokens of a turn as the consumer reads it natively (content and tool calls)."""
    n = tok.count(turn.text)
    for c in turn.tool_calls:
        n += tok.count(c.function.name) + tok.count(c.function.arguments)
    return n


class Memory:
    """A conversation memory that fits any budget.

    Thread-safe: every public method holds the memory's lock, so threads may add and build
    contexts at once; a context is a snapshot of whole turns, never of half an `add`. Several
    processes may share one SQLite file, each with its own Memory: ids follow one total order, and
    each Memory catches up with the others' turns on its next `add`, `context`, `len` or `pages`.
    Open a Memory after forking, not before (a SQLite connection must not cross a fork).

    >>> mem = Memory(budget=Budget(tokens=4000), keep_recent=2)
    >>> _ = mem.add({"role": "user", "content": "hello"})
    >>> mem.context().tokens <= 4000
    True
    """

    def __init__(
        self,
        *,
        vision: str | CostModel = "deepseek-ocr",
        budget: Budget = DEFAULT_BUDGET,
        keep_recent: int = 4,
        store: str | Path | Store | None = None,
        tokens_per_page: int | None = None,
        render: RenderConfig | str | Path | None = None,
        tokenizer: Any = None,
        ladder: AgeLadder | None = None,
        fitter: OldestFirst | None = None,
        factsheet: Factsheet | None = Factsheet(),  # noqa: B008 (frozen, safe to share)
        gate: LegibilityGate | None = None,
        image_cache_bytes: int = 256 * 2**20,
        limits: Limits = Limits(),  # noqa: B008 (frozen, safe to share)
        sticky_tiers: bool = False,
    ) -> None:
        if keep_recent < 0:
            raise ValueError(f"keep_recent must be >= 0, got {keep_recent}")
        self.vision = get_cost_model(vision)
        self.budget = budget
        self.keep_recent = keep_recent
        self.render = RenderConfig.load(render) if isinstance(render, (str, Path)) else render or RenderConfig()
        self.tokens_per_page = tokens_per_page or self.render.tokens_per_page
        self.tokenizer = get_tokenizer(tokenizer)
        self.ladder = ladder or AgeLadder()
        self.fitter = fitter or OldestFirst()
        self.factsheet = factsheet
        self.gate = gate
        self.limits = limits
        # A page is never sent sharper than in the last context for the same budget and vision:
        # it fades and stays faded (a dropped page stays dropped). Under a tight budget the fitter
        # otherwise moves the newest pages up and down a tier as recent turns come and go, and a
        # prompt that moves is prefilled again (benchmarks/local_model.py: 703 -> 524 tokens per
        # call at 2,000 positions, for 4% of the budget left unused).
        self.sticky_tiers = sticky_tiers
        self.layout = Layout(self.render)
        self.images = PageImages(self.layout, max_bytes=image_cache_bytes)
        self._lock = threading.RLock()
        self._store = self._open_store(store)
        self._load()

    def _load(self) -> None:
        """(Re)build the in-memory view from the store: restored pages, then every turn replayed."""
        self._packer = Packer(self.layout, self.tokenizer, self.tokens_per_page)
        self._system: list[Turn] = []
        self._pinned: list[Turn] = []
        self._window: list[Turn] = []
        self._tokens: dict[int, int] = {}  # turn id -> native text tokens (unpacked turns)
        self._page_tokens: list[int] = []  # text tokens of each sealed page
        # Exact strings of packed turns, found the first time a context images them; the turns
        # themselves are read back from the store.
        self._facts = TurnFacts(self._store.get)
        self._last_tiers: dict[tuple[int, str], list[Tier]] = {}  # sticky_tiers: (budget, vision) -> tiers
        self._count = 0
        self._text_total = 0
        self._last_id = -1
        self._restore_pages()
        self._saved = len(self._packer.sealed)
        self._sync()

    # -- persistence ------------------------------------------------------------------------

    def _open_store(self, store: str | Path | Store | None) -> Store:
        if store is None:
            return MemoryStore()
        if isinstance(store, (str, Path)):
            s: Store = SQLiteStore(store)
        else:
            s = store
        # Pages are derived data, re-packed from the turns on open: a changed render config
        # re-renders every page instead of mixing old and new pixels.
        s.set_meta(self._meta())
        return s

    def _meta(self) -> dict[str, Any]:
        return {
            "vision": self.vision.name,
            "budget": self.budget.model_dump(mode="json"),
            "keep_recent": self.keep_recent,
            "tokens_per_page": self.tokens_per_page,
            "render": self.render.model_dump(mode="json"),
            "limits": self.limits.model_dump(mode="json"),
            "sticky_tiers": self.sticky_tiers,
        }

    def _restore_pages(self) -> None:
        """Sealed pages stored under this memory's packing key: a reopen need not lay them out again."""
        rows = self._store.load_pages(self._packer.key)
        try:
            bodies = [json.loads(r) for r in rows]
            self._packer.restore([b["lines"] for b in bodies])
            self._page_tokens = [int(b["tokens"]) for b in bodies]
        except (ValueError, KeyError, TypeError):  # derived data: damaged pages are re-packed
            self._packer = Packer(self.layout, self.tokenizer, self.tokens_per_page)
            self._page_tokens = []

    def _sync(self) -> None:
        """Take in turns the store holds that this memory has not seen (other writers' too)."""
        for turn in self._store.since(self._last_id):
            self._ingest(turn)
        sealed = self._packer.sealed
        if len(sealed) > self._saved:
            # A generator: the in-memory store never serializes what it does not keep.
            self._store.save_pages(self._packer.key, self._saved, (
                json.dumps({"tokens": n, "lines": p.to_json()}, ensure_ascii=True)
                for p, n in zip(sealed[self._saved :], self._page_tokens[self._saved :])))
            self._saved = len(sealed)

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
        """Reopen a memory saved with `Memory(store=path)`; keyword arguments override its settings."""
        probe = SQLiteStore(path, create=False)
        try:
            meta = probe.get_meta() or {}
        finally:
            probe.close()
        settings: dict[str, Any] = {}
        if "vision" in meta:
            settings["vision"] = meta["vision"]
        if "budget" in meta:
            settings["budget"] = Budget.model_validate(meta["budget"])
        for key in ("keep_recent", "tokens_per_page", "sticky_tiers"):
            if key in meta:
                settings[key] = meta[key]
        if "render" in meta:
            settings["render"] = RenderConfig.model_validate(meta["render"])
        if "limits" in meta:
            settings["limits"] = Limits.model_validate(meta["limits"])
        settings.update(overrides)
        return cls(store=path, **settings)

    # -- adding -------------------------------------------------------------------------------

    def add(self, turn: Turn | Mapping[str, Any], *, pin: bool = False) -> Turn:
        """Store a turn (a Turn or an OpenAI-style dict) and return it with its id.

        `pin=True` keeps the turn as text in every context (system turns always are).
        """
        t = to_turn(turn)
        if pin and not t.pinned:
            t = Turn.model_validate({**t.model_dump(), "pinned": True})  # validated: tool turns refuse pins
        self.limits.check(t)
        with self._lock:
            stored = self._store.append(t.model_copy(update={"id": None}))
            self._sync()
            return stored

    def _ingest(self, turn: Turn) -> None:
        assert turn.id == self._last_id + 1, (turn.id, self._last_id)  # stores count 0, 1, 2, ...
        self._last_id = turn.id
        self._count += 1
        n = self._tokens[turn.id] = turn_tokens(turn, self.tokenizer)
        self._text_total += n
        self._facts.note(turn)
        if turn.role == "system" or turn.pinned:
            (self._system if turn.role == "system" else self._pinned).append(turn)
        else:
            self._window.append(turn)
            self._pack_overflow()

    def _pack_overflow(self) -> None:
        cuts = safe_cuts(self._window)
        target = len(self._window) - self.keep_recent
        cut = max([c for c in cuts if c <= target] + [cuts[0]])
        # Turns already on restored pages go back onto them, whatever keep_recent is now.
        on_pages = sum(1 for t in self._window if t.id <= self._packer.restored_upto)  # type: ignore[operator]
        if cut < on_pages:
            cut = min(c for c in cuts if c >= on_pages)
        for t in self._window[:cut]:
            for page in self._packer.add(t):
                self._page_tokens.append(self.tokenizer.count(page.text))
            self._tokens.pop(t.id, None)  # type: ignore[arg-type]
        del self._window[:cut]

    # -- reading ------------------------------------------------------------------------------

    @property
    def recent(self) -> list[Turn]:
        """Turns not on any page yet: they stay native text while the budget allows."""
        with self._lock:
            self._sync()
            return list(self._window)

    def transcript(self) -> list[Turn]:
        """Every turn ever added, verbatim, in order."""
        return self._store.since(-1)

    def __len__(self) -> int:
        with self._lock:
            self._sync()
            return self._count

    @property
    def pages(self) -> list[Page]:
        """Sealed pages plus the open one (not sealed yet), oldest first."""
        with self._lock:
            self._sync()
            return [*self._packer.sealed, *self._packer.preview()]

    def context(self, *, budget: Budget | None = None, vision: str | CostModel | None = None) -> Context:
        """The conversation fitted to the budget. Raises BudgetError if even the pinned text is too big."""
        with self._lock:
            self._sync()
            return self._context(budget, vision)

    def _context(self, budget: Budget | None, vision: str | CostModel | None) -> Context:
        budget = budget or self.budget
        model = self.vision if vision is None else get_cost_model(vision)
        fixed = [TextSegment("system", t.text, self._tokens[t.id], t) for t in self._system]  # type: ignore[index]
        fixed += [TextSegment("pinned", t.text, self._tokens[t.id], t) for t in self._pinned]  # type: ignore[index]
        plan = self._plan(budget, model, sum(s.tokens for s in fixed), self.limits.page_cap(model.max_images))
        sheet: dict[int, str] = {}
        if self.factsheet is not None:
            plan, sheet = with_factsheet(plan, budget.limit, self.factsheet, self._facts, self.fitter, self._window,
                                         self.tokenizer.count)
        if self.sticky_tiers:
            self._last_tiers.pop(key := (budget.limit, model.name), None)
            self._last_tiers[key] = plan.tiers[: len(self._packer.sealed)]
            while len(self._last_tiers) > 8:  # a few budgets in use at once, not every one ever asked
                del self._last_tiers[next(iter(self._last_tiers))]
        return self._assemble(fixed, plan, sheet, budget, model)

    def _plan(self, budget: Budget, model: CostModel, fixed_tokens: int, max_pages: int | None) -> Plan:
        """Choose how many recent turns stay native (as many as fit) and every page's tier."""
        tok, window = self.tokenizer, self._window
        caption_tokens = tok.count(CAPTION)
        recent_tokens = [self._tokens[t.id] for t in window]  # type: ignore[index]
        # The gate reads sealed pages only: unsealed ones change with every turn, and they are
        # the newest, which the ladder keeps sharpest.
        sealed = self._packer.sealed
        floors = self.gate.floors(sealed, self.images) if self.gate else [Tier.GONE] * len(sealed)
        for cut in safe_cuts(window):
            extra = self._packer.preview(window[:cut])
            pages = [*sealed, *extra]
            costs = page_costs([*self._page_tokens, *(tok.count(p.text) for p in extra)], model,
                               [*floors, *[Tier.GONE] * len(extra)])
            room = budget.limit - fixed_tokens - sum(recent_tokens[cut:])
            tiers = schedule(costs, room - (caption_tokens if pages else 0), self.ladder, self.fitter,
                             unsealed=len(extra))
            if tiers is None and room >= 0:
                tiers = [Tier.GONE] * len(pages)  # every page dropped: no caption needed either
            if tiers is not None and max_pages is not None:
                tiers = cap_images(tiers, costs, max_pages)
            if tiers is not None:
                cap_at(tiers, self._last_tiers.get((budget.limit, model.name), []))
                return Plan(cut, pages, tiers, costs, fixed_tokens + sum(recent_tokens[cut:]), caption_tokens)
        raise BudgetError(
            f"the context needs at least {fixed_tokens} tokens for system and pinned turns, but the budget "
            f"allows {budget.limit}: short by {fixed_tokens - budget.limit}. Raise the budget or unpin turns.",
            shortfall=fixed_tokens - budget.limit,
        )

    def _assemble(self, fixed: list[TextSegment], plan: Plan, sheet: dict[int, str], budget: Budget,
                  model: CostModel) -> Context:
        segs: list[TextSegment | PageSegment] = list(fixed)

        def facts(place: int) -> None:
            if place in sheet:
                segs.append(TextSegment("factsheet", sheet[place], self.tokenizer.count(sheet[place])))

        if any(t is not Tier.GONE for t in plan.sent):
            segs.append(TextSegment("caption", CAPTION, plan.caption_tokens))
        facts(-1)
        for i, (page, tier, cost) in enumerate(zip(plan.pages, plan.sent, plan.costs)):
            if tier is not Tier.GONE:
                paper = cost.text_tokens if tier is Tier.TEXT else model.paper_tokens(tier, model.tier_size(tier))
                segs.append(PageSegment(page, tier, cost.cost(tier), paper, self.images))
                facts(i)
        window = self._window[plan.cut:]
        segs += [TextSegment("recent", t.text, self._tokens[t.id], t, partial(self._drawn, t))  # type: ignore[index]
                 for t in window]
        gone = tuple(p for p, t in zip(plan.pages, plan.sent) if t is Tier.GONE)
        return Context(tuple(segs), budget, model, gone)

    def _drawn(self, turn: Turn) -> str:
        """The turn's lines as a page draws them."""
        with self._lock:
            return "\n".join(e.line.text for e in self._packer.entries(turn))

    def stats(self, context: Context | None = None) -> dict[str, Any]:
        """Text tokens of the whole transcript, tokens of the default context, ratio, pages per tier."""
        ctx = context or self.context()
        report = ctx.report()
        return {
            "turns": len(self),
            "text_tokens": self._text_total,
            "context_tokens": ctx.tokens,
            "ratio": round(self._text_total / ctx.tokens, 2) if ctx.tokens else None,
            "pages": report["pages"],
            "sealed_pages": len(self._packer.sealed),
            "vision": ctx.vision.name,
        }
