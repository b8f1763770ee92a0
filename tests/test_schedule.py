"""The planner's invariants, as properties over random memories, run over every policy (a new
ladder or fitter joins POLICIES and is held to all of them)."""

from __future__ import annotations

import pytest
from conftest import conversations
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from optictx import COST_MODELS, Budget, BudgetError, Memory, Policy, Tier
from optictx.blocks import IN_PLACE
from optictx.handles import LABEL_TOKENS
from optictx.native import image_sizes, images_cost
from optictx.pieces import PageSegment
from optictx.schedule import AgeLadder, DropOldest, OldestFirst, PageCost, ladder_tiers, page_costs
from optictx.turnindex import text_tokens

PROPS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
VISIONS = st.sampled_from(list(COST_MODELS))
POLICIES = {
    "default": Policy(),
    # Drop whole pages oldest first, every page on the ladder (the open page too), tiers moving
    # at every seal, sticky, and pages even where the whole conversation would fit as text: as far
    # from the default as the knobs go.
    "drop-oldest": Policy(ladder=AgeLadder(hold=1, unsealed=None), fitter=DropOldest(), sticky=True, verbatim=False),
    # Every context planned afresh: the planner a compaction runs (prefix.py), on its own.
    "stateless": Policy(cache=False),
}


def schedule(costs, room, ladder, fitter, *, unsealed=0):
    """Steps 3 and 4 of the plan alone: the ladder's tiers, then the fitter's, within `room`."""
    return fitter.fit(ladder_tiers(costs, ladder, unsealed=unsealed), costs, room) if room >= 0 else None


def _memory(msgs, budget, keep_recent, vision, tpp=200, policy="default"):
    mem = Memory(vision=vision, budget=Budget(tokens=budget), keep_recent=keep_recent, tokens_per_page=tpp,
                 policy=POLICIES[policy])
    for m in msgs:
        mem.add(m)
    return mem


def _fixed_tokens(mem):
    """Tokens of the turns that stay text whatever the budget: system turns (the leading ones at
    the front, later ones in place) and pinned turns."""
    return sum(text_tokens(t, mem.tokenizer) for t in mem.transcript() if t.role == "system" or t.pinned)


def _front(mem):
    """The prompt's fixed front: the system turns before any other turn, and the pinned turns."""
    turns = mem.transcript()
    leading = next((i for i, t in enumerate(turns) if t.role != "system"), len(turns))
    return [t for i, t in enumerate(turns) if i < leading or t.pinned]


def _context_or_error(mem):
    try:
        return mem.context(), None
    except BudgetError as exc:
        return None, exc


def _fitted(mem):
    """The context; examples whose pinned text alone is over budget are discarded (tested above)."""
    ctx, _ = _context_or_error(mem)
    assume(ctx is not None)
    return ctx


memories = st.builds(
    _memory, conversations(), st.integers(1, 6000), st.integers(0, 8), VISIONS, st.sampled_from([64, 200, 1000]),
    st.sampled_from(list(POLICIES)),
)


@PROPS
@given(memories)
def test_never_over_budget_else_budget_error_with_shortfall(mem):
    ctx, err = _context_or_error(mem)
    fixed = _fixed_tokens(mem)
    if err is not None:
        assert fixed > mem.budget.limit
        assert err.shortfall == fixed - mem.budget.limit
        assert str(err.shortfall) in str(err)
    else:
        assert ctx.tokens <= mem.budget.limit
        assert ctx.tokens == sum(s.tokens for s in ctx.segments)


@PROPS
@given(memories)
def test_system_and_pinned_turns_stay_text(mem):
    ctx = _fitted(mem)
    texts = {s.turn.id for s in ctx.text_segments if s.turn is not None}
    front = {t.id for t in _front(mem)}
    for t in mem.transcript():
        if t.role == "system" or t.pinned:
            assert t.id in texts
            on_pages = [e.line.text for s in ctx.pages for e in s.page.entries if e.turn_id == t.id and e.covers]
            if t.id in front:
                assert not on_pages
            else:  # a system turn in place: a page shows only the line that says where its text is
                assert on_pages in ([], [f"#{t.id} SYSTEM{IN_PLACE}"]), on_pages


@PROPS
@given(memories)
def test_recent_turns_stay_text_while_they_fit(mem):
    ctx = _fitted(mem)
    front = {t.id for t in _front(mem)}
    conversational = [t for t in mem.transcript() if t.id not in front]
    recent = mem.recent
    assert recent == conversational[len(conversational) - len(recent):]
    fixed = _fixed_tokens(mem)
    if fixed + sum(text_tokens(t, mem.tokenizer) for t in recent) <= mem.budget.limit:
        native = [s.turn.id for s in ctx.text_segments if s.kind == "recent"]
        expected = [t.id for t in (conversational if ctx.verbatim else recent)]
        if ctx.event is None:  # planned afresh: exactly the recent turns
            assert native == expected
        else:  # frozen pages, then every turn after them as itself: the recent ones among them
            assert native[len(native) - len(expected):] == expected
            assert native == [t.id for t in conversational[len(conversational) - len(native):]]
    # at least keep_recent conversational turns are held out of the pages (orphan tool results aside)
    if not any(t.role == "tool" for t in conversational):
        assert len(recent) >= min(mem.keep_recent, len(conversational))


@PROPS
@given(memories)
def test_tool_calls_and_results_never_split(mem):
    ctx = _fitted(mem)
    native = [s.turn for s in ctx.text_segments if s.kind in ("recent", "inline")]
    answered = {t.tool_call_id for t in mem.transcript() if t.role == "tool"}
    seen_calls: set[str] = set()
    for t in native:
        seen_calls.update(t.call_ids)
        if t.role == "tool":
            assert t.tool_call_id in seen_calls, "a tool result without its call in the text part"
    native_results = {t.tool_call_id for t in native if t.role == "tool"}
    assert (seen_calls & answered) <= native_results, "a call in the text part whose result went to a page"
    for m in ctx.to_openai():
        if m["role"] == "tool":
            assert any(c["id"] == m["tool_call_id"] for p in ctx.to_openai() for c in p.get("tool_calls", []))


@PROPS
@given(memories)
def test_decay_is_monotone_in_age(mem):
    ctx = _fitted(mem)
    tiers = sorted([(p.page.index, p.tier) for p in ctx.pages] + [(p.index, Tier.GONE) for p in ctx.gone])
    ranks = [t.rank for _, t in tiers]
    assert ranks == sorted(ranks), tiers


@PROPS
@given(memories)
def test_images_only_where_they_pay(mem):
    ctx = _fitted(mem)
    for p in ctx.pages:
        if p.tier.is_image:
            assert p.tokens < mem.tokenizer.count(p.text), (p.tier, p.tokens)
            assert p.tokens == ctx.vision.page_tokens(p.tier)


def test_system_and_pinned_turns_stay_text_on_the_sample(sample):
    """The property above where each case certainly occurs: the leading system prompt, a pinned
    task, and a system reminder mid-conversation whose neighbours are on pages."""
    mem = Memory(budget=Budget(tokens=6000), keep_recent=4, verbatim=False)
    for i, m in enumerate(sample[:200]):
        mem.add(m, pin=i == 1)
        if i == 40:
            mem.add({"role": "system", "content": "Reminder: keep the todo list current."})
    ctx = mem.context()
    texts = {s.turn.id for s in ctx.text_segments if s.turn is not None}
    turns = mem.transcript()
    system, pinned = turns[0], turns[1]
    reminder = next(t for t in turns if t.role == "system" and t.id > 1)
    assert pinned.pinned and {system.id, pinned.id, reminder.id} <= texts
    drawn = {t.id: [e.line.text for s in ctx.pages for e in s.page.entries if e.turn_id == t.id and e.covers]
             for t in (system, pinned, reminder)}
    assert drawn[system.id] == drawn[pinned.id] == []
    assert drawn[reminder.id] == [f"#{reminder.id} SYSTEM{IN_PLACE}"]  # on the page that holds its neighbours


@pytest.mark.parametrize("vision", ["deepseek-ocr", "anthropic", "openai:gpt-4o"])
def test_images_only_where_they_pay_on_the_sample(sample, vision):
    """The property above on a conversation that certainly sends images (an example of the
    strategy may send none, and its loop then checks nothing)."""
    mem = Memory(budget=Budget(tokens=12_000), keep_recent=4, vision=vision, verbatim=False)
    for m in sample[:240]:
        mem.add(m)
    ctx = mem.context()
    images = [p for p in ctx.pages if p.tier.is_image]
    assert images, [p.tier for p in ctx.pages]
    for p in images:
        assert p.tokens < mem.tokenizer.count(p.text), (p.tier, p.tokens)
        assert p.tokens == ctx.vision.page_tokens(p.tier)


@PROPS
@given(memories)
def test_no_turn_is_lost_every_turn_is_somewhere(mem):
    ctx = _fitted(mem)
    placed = {tid for s in ctx.segments for tid in s.turn_ids} | {tid for p in ctx.gone for tid in p.turn_ids}
    assert placed == {t.id for t in mem.transcript()}
    if ctx.verbatim:  # the conversation as it came: every turn in its own place
        assert [s.turn.id for s in ctx.segments] == [t.id for t in mem.transcript()]
        return
    kinds = [s.kind if hasattr(s, "kind") else "page" for s in ctx.segments]
    order = {"system": 0, "pinned": 1, "caption": 2, "page": 3, "factsheet": 3, "label": 3, "copies": 3, "inline": 3,
             "recent": 4}
    assert [order[k] for k in kinds] == sorted(order[k] for k in kinds)
    # a turn in place sits between the pages that hold the turns before and after it
    pages = sorted([*(s.page for s in ctx.pages), *ctx.gone], key=lambda p: p.index)
    inline = [s.turn.id for s in ctx.segments if getattr(s, "kind", "") == "inline"]
    assert inline == sorted(inline)
    for tid in inline:
        assert all(min(p.turn_ids) <= tid for p in ctx.pages if ctx.segments.index(p) < _at(ctx, tid))
        assert all(min(p.turn_ids) > tid for p in ctx.pages if ctx.segments.index(p) > _at(ctx, tid))
        assert [p for p in pages if min(p.turn_ids) <= tid], "a turn in place without a page before it"
    # factsheet parts: the dropped turns' opens the pages; every other one follows its sealed page
    for before, seg, kind in zip([None, *ctx.segments], ctx.segments, kinds):
        if kind == "factsheet" and seg.text.startswith(mem.factsheet.gone_header):
            assert before is None or before.kind in ("system", "pinned", "caption")
        elif kind == "factsheet":
            assert isinstance(before, PageSegment) and before.page.sealed and before.tier.is_image


def _at(ctx, tid):
    return next(i for i, s in enumerate(ctx.segments) if getattr(s, "kind", "") == "inline" and s.turn.id == tid)


@PROPS
@given(memories)
def test_never_costs_more_than_the_conversation_as_it_came(mem):
    ctx = _fitted(mem)
    turns = mem.transcript()
    original = sum(text_tokens(t, mem.tokenizer) + images_cost(image_sizes(t), ctx.vision) for t in turns)
    if not mem.verbatim:
        return
    assert ctx.tokens <= original
    cap = mem.limits.image_cap(ctx.vision.max_images)
    if original <= mem.budget.limit and (cap is None or sum(len(image_sizes(t)) for t in turns) <= cap):
        assert ctx.verbatim and ctx.tokens == original
        assert ctx.to_openai() == [t.to_openai() for t in turns]
    else:
        assert not ctx.verbatim


def test_default_ladder_by_age_then_budget_demotes_oldest_first():
    costs = page_costs([1000] * 10, COST_MODELS["deepseek-ocr"])
    roomy = schedule(costs, 10**6, AgeLadder(), OldestFirst())
    assert roomy == [Tier.TINY] * 3 + [Tier.SMALL] * 4 + [Tier.BASE] * 2 + [Tier.LARGE]
    tight = schedule(costs, 1600, AgeLadder(), OldestFirst(batch=4, shrink_first=False))
    assert sum(c.cost(t) for c, t in zip(costs, tight)) <= 1600
    # The oldest block of 4 pages stepped down together (TINY -> GONE, SMALL -> TINY); the rest kept.
    assert tight[:4] == [Tier.GONE] * 3 + [Tier.TINY]
    assert tight[4:] == roomy[4:]


def test_pages_shrink_to_tiny_before_any_is_dropped():
    costs = page_costs([1000] * 10, COST_MODELS["deepseek-ocr"])
    tiny = COST_MODELS["deepseek-ocr"].page_tokens(Tier.TINY) + LABEL_TOKENS  # a page and its label
    assert schedule(costs, 10 * tiny, AgeLadder(), OldestFirst()) == [Tier.TINY] * 10
    # Sharper pages come back newest first as room grows; pages go only when all are TINY.
    roomier = schedule(costs, 10 * tiny + 200, AgeLadder(), OldestFirst())
    assert roomier[:9] == [Tier.TINY] * 9 and roomier[9] is not Tier.TINY
    fewer = schedule(costs, 10 * tiny - 1, AgeLadder(), OldestFirst(batch=1))
    assert fewer == [Tier.GONE] + [Tier.TINY] * 9


def test_under_a_small_budget_no_block_is_dropped_whole_where_its_newest_pages_fit():
    """Dropping in blocks of 4 keeps the front still, but where fewer than a block is left shown,
    a page that fits the room left comes back: three TINY pages' room shows three, not two (the
    oldest blocks of 0-3 and 4-7 dropped whole) or none."""
    costs = page_costs([1000] * 10, COST_MODELS["deepseek-ocr"])
    tiny = COST_MODELS["deepseek-ocr"].page_tokens(Tier.TINY) + LABEL_TOKENS
    assert schedule(costs, 3 * tiny + 5, AgeLadder(), OldestFirst()) == [Tier.GONE] * 7 + [Tier.TINY] * 3
    assert schedule(costs[:4], 3 * tiny, AgeLadder(), OldestFirst()) == [Tier.GONE] + [Tier.TINY] * 3


@PROPS
@given(st.lists(st.integers(20, 1500), min_size=1, max_size=40), st.integers(0, 4000), VISIONS)
def test_fewer_pages_shown_than_a_block_only_where_no_more_fit(pages, room, vision):
    """Where the fitter shows fewer pages than its block, the newest page it dropped would not
    fit the room left at any tier it may take, none sharper than the page after it (the
    arithmetic of the costs is the oracle)."""
    costs = page_costs(pages, COST_MODELS[vision])
    fitter = OldestFirst()
    tiers = schedule(costs, room, AgeLadder(), fitter)
    gone = [i for i, t in enumerate(tiers) if t is Tier.GONE]
    assume(gone and sum(t is not Tier.GONE for t in tiers) < fitter.batch)
    left = room - sum(c.cost(t) for c, t in zip(costs, tiers))
    i = gone[-1]
    newer = tiers[i + 1].rank if i + 1 < len(tiers) else Tier.TEXT.rank
    allowed = [costs[i].cost(t) for t in costs[i].options if t is not Tier.GONE and t.rank <= newer]
    assert not allowed or min(allowed) > left


def test_demotions_are_batched_so_the_prefix_changes_rarely():
    """Adding pages one by one under a fixed budget: demoted in batches of 4, the oldest pages'
    tiers change in far fewer steps than demoted one at a time."""
    model = COST_MODELS["deepseek-ocr"]
    changes = {}
    for batch in (1, 4):
        history = []
        for n in range(1, 60):
            tiers = schedule(page_costs([1000] * n, model), 2500, AgeLadder(), OldestFirst(batch=batch))
            history.append(tuple(tiers[:8]))
        changes[batch] = sum(1 for a, b in zip(history, history[1:]) if a[: len(b)] != b[: len(a)])
    assert changes[4] < len(history) // 2 and changes[4] <= 0.7 * changes[1], changes  # 10 against 16


def test_text_page_is_kept_when_images_do_not_pay():
    anthropic = COST_MODELS["anthropic"]
    tiers = schedule(page_costs([400, 400], anthropic), 10**6, AgeLadder(), OldestFirst())
    assert tiers == [Tier.TEXT, Tier.TEXT]  # a 640 px page costs Claude 547 (and its label) > 400 text tokens


def test_ladder_must_decay():
    with pytest.raises(ValueError, match="sharper with age"):
        AgeLadder(steps=((1, Tier.TINY), (1, Tier.LARGE)))


def test_page_cost_options_only_list_paying_tiers():
    c = PageCost(200, {t: COST_MODELS["deepseek-ocr"].page_tokens(t) for t in
                       (Tier.GUNDAM, Tier.LARGE, Tier.BASE, Tier.SMALL, Tier.TINY)})
    assert c.options == (Tier.TEXT, Tier.SMALL, Tier.TINY, Tier.GONE)


FLOORS = st.sampled_from([Tier.GONE, Tier.TINY, Tier.SMALL, Tier.BASE, Tier.LARGE, Tier.TEXT])


@PROPS
@given(st.lists(st.tuples(st.integers(20, 1500), FLOORS), min_size=1, max_size=40), st.integers(0, 20000), VISIONS)
def test_gate_floors_are_never_undercut_and_the_budget_holds(pages, room, vision):
    """With a legibility gate, every page is sent at or above its floor (or dropped), the budget
    holds, and the tiers it was scheduled at stay monotone: only a floor raises a page."""
    costs = page_costs([n for n, _ in pages], COST_MODELS[vision], [f for _, f in pages])
    tiers = schedule(costs, room, AgeLadder(), OldestFirst())
    assert tiers is not None  # all GONE always fits a room >= 0
    sent = [c.actual(t) for c, t in zip(costs, tiers)]
    assert sum(c.cost(t) for c, t in zip(costs, tiers)) <= room
    assert sum(c.cost(t) for c, t in zip(costs, sent)) <= room  # what is sent costs what was scheduled
    for (_, floor), s in zip(pages, sent):
        assert s is Tier.GONE or s.rank >= floor.rank
    assert all(newer.rank >= older.rank for older, newer in zip(tiers, tiers[1:]))
    for c, t, s in zip(costs, tiers, sent):
        assert s == t or s in (c.floor, Tier.TEXT)  # raised only to the floor (text if it does not pay)


def test_gated_page_is_sent_at_its_floor_not_blurred_further():
    model = COST_MODELS["deepseek-ocr"]
    plain, gated = page_costs([1000, 1000], model, [Tier.GONE, Tier.BASE])
    ladder = AgeLadder(steps=(), rest=Tier.TINY)  # every page wants TINY
    tiers = schedule([gated, plain], 10_000, ladder, OldestFirst())
    assert [c.actual(t) for c, t in zip([gated, plain], tiers)] == [Tier.BASE, Tier.TINY]
    # Room for only the newer page's TINY: the gated page is dropped, never sent below BASE.
    tiers = schedule([gated, plain], model.page_tokens(Tier.TINY) + LABEL_TOKENS, ladder, OldestFirst(batch=1))
    assert [gated.actual(tiers[0]), plain.actual(tiers[1])] == [Tier.GONE, Tier.TINY]
    sparse = page_costs([200], model, [Tier.BASE])[0]  # BASE (273 + its label) costs more than its 200 text tokens
    assert sparse.actual(Tier.TINY) is Tier.TEXT


def test_a_held_ladder_moves_older_tiers_only_once_per_block():
    held, every = AgeLadder(hold=4), AgeLadder(hold=1)
    for n in range(8, 12):  # inside one block: the first 8 pages keep their tiers, new ones are LARGE
        assert held.tiers(n)[:8] == every.tiers(8)
        assert held.tiers(n)[8:] == [Tier.LARGE] * (n - 8)
    assert held.tiers(12) == every.tiers(12)  # the block is complete: aged as usual
    # The default holds pairs: a prompt prefix cache keeps its pages through every other seal.
    assert [AgeLadder().tiers(n) for n in (8, 9)] == [every.tiers(8), [*every.tiers(8), Tier.LARGE]]
    with pytest.raises(ValueError, match="hold"):
        AgeLadder(hold=0)


def test_unsealed_pages_are_text_and_take_no_place_on_the_ladder():
    ladder = AgeLadder()
    assert ladder.tiers(5, unsealed=2) == [*ladder.tiers(3), Tier.TEXT, Tier.TEXT]
    assert AgeLadder(unsealed=None).tiers(5, unsealed=2) == ladder.tiers(5)
    with pytest.raises(ValueError, match="sharper"):
        AgeLadder(unsealed=Tier.TINY)  # the newest pages would be blurrier than older ones


def test_within_budget_a_turn_that_seals_no_page_leaves_the_prompt_before_the_open_page_alone(sample):
    def head(ctx):  # system, caption, sealed pages and factsheet: everything before the open page
        out = []
        for s in ctx.segments:
            if isinstance(s, PageSegment):
                if not s.page.sealed:
                    break
                out.append((s.page.digest, s.tier))
            elif s.kind == "recent":
                break
            else:
                out.append(s.text)
        return out

    mem = Memory(budget=Budget(tokens=50_000), keep_recent=2)  # no page is dropped
    before, unchanged = None, 0
    for m in sample[:200]:
        sealed = sum(p.sealed for p in mem.pages)
        mem.add(m)
        ctx = mem.context()
        assert all(s.tier is Tier.TEXT for s in ctx.pages if not s.page.sealed)
        if sealed and sum(p.sealed for p in mem.pages) == sealed:
            assert head(ctx) == before
            unchanged += 1
        before = head(ctx)
    assert unchanged > 100


def test_sticky_tiers_never_sharpen_a_page_again(sample):
    """A big tool output in the recent window squeezes the pages; once it is packed the room comes
    back. Without sticky tiers the squeezed pages come back sharper; with them they stay faded."""
    big = {"role": "tool", "tool_call_id": "x1", "content": "row 42 ok\n" * 300}
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "x1", "type": "function", "function": {"name": "dump", "arguments": "{}"}}]}
    rises = {}
    for sticky in (False, True):
        mem = Memory(budget=Budget(tokens=3000), keep_recent=2, sticky_tiers=sticky)
        for m in sample[:120]:
            mem.add(m)
        seen: dict[int, int] = {}
        rises[sticky] = 0
        for m in [call, big, *sample[120:140]]:
            mem.add(m)
            ctx = mem.context()
            assert ctx.tokens <= 3000
            tiers = {s.page: s.tier.rank for s in ctx.pages} | {p: 0 for p in ctx.gone}  # 0: dropped
            rises[sticky] += sum(rank > seen[p.index] for p, rank in tiers.items() if p.index in seen)
            seen.update({p.index: rank for p, rank in tiers.items() if p.sealed})
            if sticky:
                again = mem.context(budget=Budget(tokens=9000))  # another budget: its own history
                assert again.tokens > ctx.tokens
    assert rises[True] == 0 < rises[False], rises
