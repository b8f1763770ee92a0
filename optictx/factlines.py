"""The factsheet's lines on one plan: which turns' strings it lists, where its lines go, and the
room it takes from the pages (the last planning step). `facts.Factsheet` is the policy (what
strings, ranking, room); this is its use on one plan of a memory."""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from functools import partial

from .errors import ConfigError
from .facts import Factsheet
from .lru import LRU
from .planned import Plan
from .schedule import Fitter
from .tiers import Tier
from .turns import Turn

Lines = list[tuple[int, str]]  # (turn id, line)


class TurnFacts:
    """Exact strings per turn id, found the first time a context needs them (most pages of a long
    memory never are imaged), and which turns are tool results. `read(ids)` fetches turns that
    are no longer in RAM (from the store), so a packed turn is not kept twice. Turns in `skip`
    stay text wherever they are (`TurnIndex.inline_ids`): they have none."""

    def __init__(self, read: Callable[[list[int]], Mapping[int, Turn]], skip: Container[int] = frozenset()) -> None:
        self._read, self._skip = read, skip
        self._found: dict[int, tuple[str, ...]] = {}
        self._finder: object = None  # what found them: a factsheet with another finder starts over
        self.tool_turns: set[int] = set()  # the factsheet ranks them after what people said
        self.lines_cache: LRU[tuple[object, ...], Lines] = LRU(max_items=8)  # see fact_lines: a few budgets at once

    def note(self, turn: Turn) -> None:
        if turn.role == "tool":
            self.tool_turns.add(turn.id)  # type: ignore[arg-type]

    def of(self, ids: set[int], factsheet: Factsheet, recent: Sequence[Turn]) -> Mapping[int, tuple[str, ...]]:
        """A lazy mapping over `ids`: a turn is looked at (in `recent`, else read) when listed."""
        if factsheet.finder is not self._finder:
            self._found, self._finder = {}, factsheet.finder
        return _Lazy(self, ids, factsheet, {t.id: t for t in recent})  # type: ignore[misc]

    def strings(self, tid: int, factsheet: Factsheet, recent: Mapping[int, Turn]) -> tuple[str, ...]:
        found = self._found.get(tid)
        if found is None and tid in self._skip:
            return ()
        if found is None:
            turn = recent.get(tid) or self._read([tid])[tid]
            found = self._found[tid] = factsheet.extract(" ".join(turn.texts))
        return found


class _Lazy(Mapping[int, tuple[str, ...]]):
    def __init__(self, facts: TurnFacts, ids: set[int], factsheet: Factsheet, recent: dict[int, Turn]) -> None:
        self._facts, self._ids, self._factsheet, self._recent = facts, ids, factsheet, recent

    def __getitem__(self, tid: int) -> tuple[str, ...]:
        return self._facts.strings(tid, self._factsheet, self._recent)

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)


def fact_lines(plan: Plan, factsheet: Factsheet, facts: TurnFacts, recent: Sequence[Turn],
               count: Callable[[str], int]) -> Lines:
    """Factsheet lines for the turns on sealed image pages and on dropped pages.

    Text pages need none, and neither does the page not sealed yet: it is the newest, so the
    sharpest, and it changes with every turn; a factsheet that followed it would change every turn
    too, and with it the prompt after it (prefix caches, `optictx.models`)."""
    # The lines follow from which pages are dropped and which sealed ones are images, nothing
    # else: the same split gives the same lines. Walking every dropped turn again is most of a
    # context() over a thousand pages, and most calls (after an add, before a seal) repeat a split.
    split = tuple((p.index if p.sealed else p.turn_ids, t is Tier.GONE) for p, t in zip(plan.pages, plan.actual)
                  if t is Tier.GONE or (p.sealed and t.is_image))
    key = (factsheet, count, split)
    try:
        found = facts.lines_cache.get(key)
    except TypeError:  # a finder that cannot be hashed: no cache
        found, key = None, None
    if found is not None:
        return found
    imaged = plan.shown_by.keys()
    gone = {tid for p, t in zip(plan.pages, plan.actual) if t is Tier.GONE for tid in p.turn_ids} - imaged
    strings = facts.of(imaged | gone, factsheet, recent)
    shown: set[str] = set()
    if gone:  # strings that sealed image pages still show need no line for a dropped turn
        for tid in imaged:
            shown.update(strings[tid])
    lines = factsheet.lines(strings, count, gone, facts.tool_turns & gone, shown)
    if key is not None:
        facts.lines_cache[key] = lines
    return lines


def factsheet_parts(plan: Plan, lines: Sequence[tuple[int, str]], gone_header: str) -> dict[int, str]:
    """Factsheet texts by place: -1 before the first page (dropped turns' lines, under
    `gone_header`), i right after page i of the plan (the turns that page is the last sealed
    image to show). Lines in turn order, so a sealed page's new lines join the prompt at its end."""
    groups: dict[int, list[str]] = {}
    for tid, line in sorted(lines):
        groups.setdefault(plan.shown_by.get(tid, -1), []).append(line)
    if -1 in groups:
        groups[-1].insert(0, gone_header)
    return {i: "\n".join(g) for i, g in groups.items()}


def with_factsheet(plan: Plan, limit: int, factsheet: Factsheet, facts: TurnFacts, fitter: Fitter,
                   recent: Sequence[Turn], count: Callable[[str], int]) -> Plan:
    """The plan with its factsheet under a budget of `limit` tokens, after demoting or dropping
    the oldest pages if the factsheet needs room (`Plan.factsheet`: the factsheet's texts by place).

    The factsheet may push pages out, up to its room: its lines for dropped turns are a far denser
    record than the pages (a TINY page costs 73 tokens; the strings users and the agent named
    on ~4 agent pages fit in as many). Its lines are taken again from the new plan, so the
    turns it pushed out are listed first (BENCHMARKS.md, "Needle in a haystack": the needles
    kept this way and when the factsheet could only shrink pages).
    """
    lines = fact_lines(plan, factsheet, facts, recent, count)
    room = factsheet.room(limit)
    want = min(room, _cost(count, factsheet, plan, lines)) if lines else 0
    short = want - (limit - plan.tokens)
    if short > 0:
        # The fitter only ever demotes, so it can go on from this plan with less room; with
        # room 0 it drops every page, so it always returns tiers.
        tiers = fitter.fit(plan.tiers, plan.costs, max(0, plan.page_tokens - short))
        if tiers is None:
            raise ConfigError(f"{fitter!r}.fit returned None for a room >= 0; a Fitter must then drop pages")
        dropped = plan.actual.count(Tier.GONE)
        demoted = plan.with_tiers(tiers)
        # Not where a page dropped brings lines a kept page refers to back as text past the budget:
        # the factsheet is an extra, so it takes less room rather than refit (`Plan.refit` may
        # then drop the pages that refer to the one it pushed out).
        if demoted.tokens <= limit:
            plan = demoted
            if plan.actual.count(Tier.GONE) > dropped:
                lines = fact_lines(plan, factsheet, facts, recent, count)
    kept = factsheet.select(lines, min(room, limit - plan.tokens), partial(_cost, count, factsheet, plan))
    return plan.with_factsheet(factsheet_parts(plan, kept, factsheet.gone_header))


def _cost(count: Callable[[str], int], factsheet: Factsheet, plan: Plan, lines: Sequence[tuple[int, str]]) -> int:
    """Tokens of these lines as placed (one text per place, each with its own header or none)."""
    return sum(count(text) for text in factsheet_parts(plan, lines, factsheet.gone_header).values())
