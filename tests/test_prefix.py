"""Append-only planning: between compactions the prompt only grows at its end (pieces, both
exporters), compactions happen only where the rule says, the budget holds, and the plan state
persists with the memory."""

from __future__ import annotations

import json

import pytest
from conftest import conversations
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optictx import COST_MODELS, Budget, Memory
from optictx.errors import ConfigError
from optictx.export import to_anthropic, to_openai, to_responses
from optictx.prefix import tokens_per_piece
from optictx.promptcache import Block, PromptCache, Request
from optictx.renderers import RenderConfig
from optictx.sample import sample_conversation

APPENDED = ("append", "verbatim")


def _blocks(ctx) -> list[str]:
    """The Anthropic request's blocks in cache order, each as JSON (a merged message's blocks
    count one by one: the cache sees blocks, not messages)."""
    system, messages = to_anthropic(ctx)
    out = [json.dumps(system)] if system else []
    for m in messages:
        out += [json.dumps([m["role"], b], sort_keys=True) for b in m["content"]]
    return out


def _calls(msgs, mem, budget=None, vision=None):
    """Add the messages one by one; after every user, tool or assistant turn, a context."""
    out = []
    for m in msgs:
        mem.add(m)
        out.append((len(mem), mem.context(budget=budget, vision=vision)))
    return out


def _assert_appended(prev, ctx):
    keys, before = [p.key for p in ctx.pieces], [p.key for p in prev.pieces]
    assert keys[: len(before)] == before
    old, new = _blocks(prev), _blocks(ctx)
    if not old:
        return
    # The newest message of the last call may take more blocks (roles merge), never other ones.
    assert new[: len(old) - 1] == old[:-1] and new[len(old) - 1].startswith(old[-1][: old[-1].find(",") + 1])
    a, b = to_openai(prev), to_openai(ctx)
    assert b[: len(a)] == a
    a, b = to_responses(prev), to_responses(ctx)  # OpenAI caches the Responses API's prefix the same way
    assert b[: len(a)] == a


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(msgs=conversations(max_events=40), limit=st.sampled_from([600, 1500, 4000, 30_000]),
       vision=st.sampled_from(sorted(COST_MODELS)), keep=st.integers(0, 4))
def test_between_compactions_the_prompt_is_a_prefix_of_the_next(msgs, limit, vision, keep):
    mem = Memory(budget=Budget(tokens=limit), keep_recent=keep, vision=vision, tokens_per_page=200)
    prev = None
    for m in msgs:
        mem.add(m)
        try:
            ctx = mem.context()
        except Exception as exc:  # only a budget the fixed turns do not fit
            assert type(exc).__name__ == "BudgetError"
            prev = None
            continue
        assert ctx.tokens <= limit
        if prev is not None and ctx.event in APPENDED and prev.event is not None:
            _assert_appended(prev, ctx)
        prev = ctx


def test_an_open_page_sent_as_an_image_is_the_first_lines_of_that_page_ever_after(sample):
    """Under a small budget a compaction draws the open page as it stands rather than drop
    sealed pages for its lines as text, and later calls append after it: what such a context
    sends is, line for line, the start of the page the packer ends up sealing at that index
    (the packer's own pages are the oracle), and every turn on it is off the text that follows."""
    mem = Memory(budget=Budget(tokens=1600), keep_recent=4, vision="deepseek-ocr", verbatim=False)
    sent = []
    for m in sample:
        mem.add(m)
        ctx = mem.context()
        for seg in ctx.pages:
            if not seg.page.sealed and seg.tier.is_image:
                text_turns = {s.turn.id for s in ctx.segments if getattr(s, "kind", "") == "recent"}
                assert not text_turns & set(seg.page.turn_ids)
                sent.append((ctx.event, seg.page))
    assert {e for e, _ in sent} >= {"forced", "append"}, "no open page was sent as an image, frozen or appended to"
    final = {p.index: p for p in mem.pages}
    for _, page in sent:
        assert final[page.index].entries[: len(page.entries)] == page.entries


def test_a_small_budget_sends_the_open_page_drawn_not_its_lines_as_text():
    """NIAH's 16k-token haystack in 10% of it (1,630 tokens): with the open page's 13 turns as
    text (about 1,100 tokens), every sealed page or all but two were dropped for them."""
    from optictx.eval.niah import haystack

    mem = Memory(budget=Budget(tokens=1630), keep_recent=4, vision="deepseek-ocr", verbatim=False)
    for t in haystack("builtin", 16000, 0):
        mem.add(t)
    ctx = mem.context()
    shown = [seg.page for seg in ctx.pages if seg.tier.is_image]
    assert any(not p.sealed for p in shown)
    assert sum(p.sealed for p in shown) >= 6, [p.index for p in shown]
    assert sum(1 for s in ctx.segments if getattr(s, "kind", "") == "recent") <= 4


def test_a_compaction_is_forced_only_when_appending_would_not_fit(sample):
    mem = Memory(budget=Budget(tokens=6000), keep_recent=4, vision="deepseek-ocr")
    prev, seen = None, set()
    for m in sample[:300]:
        before = len(mem)
        mem.add(m)
        ctx = mem.context()
        seen.add(ctx.event)
        if prev is not None and ctx.event == "forced":
            new = sum(mem._resident.index.tokens[i] for i in range(before, len(mem)))  # the turns since the last call
            assert prev.tokens + new > 6000 - 200  # (a new turn may also seal a page the tail shows)
        prev = ctx
    assert seen >= {"verbatim", "append", "forced"}


def test_a_local_model_compacts_only_when_the_budget_forces_it(sample):
    """A local model reads its own cache for free (`CachePricing.read` 0): appending always
    prefills least, so it never takes a paid compaction; it compacts when the budget forces it,
    and then prefills from the first piece that changed."""
    mem = Memory(budget=Budget(tokens=6000), keep_recent=4, vision="unlimited-ocr")
    events = [ctx.event for _, ctx in _calls(sample[:300], mem)]
    assert "paid" not in events and events.count("forced") >= 3, events


def test_compactions_are_rare_and_leave_headroom(sample):
    """A forced compaction plans to the budget less `Policy.headroom`, so the next is far: with
    the default headroom there are fewer of them, each leaving more room, than with none."""
    forced = {}
    for headroom in (0.3, 0.0):
        mem = Memory(budget=Budget(tokens=6000), keep_recent=4, vision="deepseek-ocr", headroom=headroom)
        calls = _calls(sample[:400], mem)
        forced[headroom] = [ctx.tokens for _, ctx in calls if ctx.event == "forced"]
        assert all(ctx.tokens <= 6000 for _, ctx in calls)
    assert len(forced[0.3]) <= len(calls) // 15  # the old planner moved the front on most calls
    assert len(forced[0.3]) < len(forced[0.0]) * 0.75, forced
    assert sum(forced[0.3]) / len(forced[0.3]) < sum(forced[0.0]) / len(forced[0.0]), forced


def _price(contexts, pricing, times=None):
    """The contexts' prompts priced one after another (60 s apart, or at `times`), a block per
    piece, with a breakpoint at each of the context's breakpoints (as the exporters mark them)."""
    return _running(contexts, pricing, times)[-1]


def _running(contexts, pricing, times=None):
    """What the calls so far cost after each call (`_price`)."""
    cache = PromptCache(pricing)
    total, out = 0.0, []
    for at, ctx in zip(times or [k * 60.0 for k in range(len(contexts))], contexts):
        ends = {b - 1 for b in ctx.breakpoints} if ctx.event is not None else {len(ctx.pieces) - 1}
        tokens = tokens_per_piece(ctx)
        blocks = tuple(Block(p.key, n, i in ends) for i, (p, n) in enumerate(zip(ctx.pieces, tokens)))
        total += cache.bill(Request(blocks, at)).cost
        out.append(total)
    return out


def _loop(sample, vision, gaps, **settings):
    """An agent loop over the sample: a context before each assistant turn, `gaps` seconds
    apart in turn; the contexts and their times."""
    mem = Memory(budget=Budget(tokens=128_000), keep_recent=4, vision=vision, **settings)
    contexts, times, t = [], [], 0.0
    for m in sample:
        mem.add(m)
        if m["role"] == "assistant":
            continue
        t += gaps[len(times) % len(gaps)]
        contexts.append(mem.context(at=t))
        times.append(t)
    return contexts, times


@pytest.mark.parametrize("vision", ["anthropic", "openai:gpt-5"])
def test_with_risk_0_the_bill_so_far_never_passes_the_conversation_as_it_came(sample, vision):
    """`Policy.risk`: with no bound (None), a warm loop's first compaction is a bet, and on the
    call it is made the bill so far passes what sending the conversation as it came would have
    cost (a session that ended there would have lost). At the default, 0.1, it never passes it
    by more than 10%; with risk 0 it never does, at any call; with a ten-minute pause every tenth
    call, the compaction the pause makes free comes, and the ones after it that its saving
    covers, so the loop still costs less in all."""
    for gaps in ([60.0], [60.0] * 9 + [600.0]):
        plain, times = _loop(sample, vision, gaps, cache=False)
        theirs = _running(plain, vision, times)
        bet, bet_times = _loop(sample, vision, gaps, risk=None)
        default, default_times = _loop(sample, vision, gaps)
        bounded, bounded_times = _loop(sample, vision, gaps, risk=0)
        assert times == bet_times == bounded_times == default_times and all(c.verbatim for c in plain)
        assert all(o <= 1.1 * t + 1e-6 for o, t in zip(_running(default, vision, times), theirs)), gaps
        ours = _running(bounded, vision, times)
        assert all(o <= t + 1e-6 for o, t in zip(ours, theirs)), gaps
        if gaps == [60.0]:
            assert any(o > t for o, t in zip(_running(bet, vision, times), theirs))
        else:
            assert "paid" in {c.event for c in bounded} and ours[-1] < theirs[-1]


# OpenAI's square pages: on its tall ones (`cost.TILE_PRICED`) this sample's first compaction
# comes on the same call warm or cold, so the cold rule is not what decides it there.
@pytest.mark.parametrize("vision,render", [("anthropic", None), ("openai:gpt-5", RenderConfig())])
def test_a_cold_cache_compacts_at_once_and_pays_less_than_appending(sample, vision, render):
    """After the provider's cache entries expired (the user away for ten minutes), appending
    writes the whole prompt anyway: the first compaction is no bet then. It comes on that call,
    where the same call a minute after the last appends, and costs less than appending would
    have under the simulator; the calls after it append to it."""
    mem = Memory(budget=Budget(tokens=128_000), keep_recent=4, vision=vision, render=render)
    calls, times, t = [], [], 0.0
    for m in sample:
        mem.add(m)
        if m["role"] == "assistant":
            continue
        t += 60
        warm = mem.context(at=t, commit=False)
        assert warm.event in APPENDED  # the warm rule has not compacted yet: it bets later
        if mem.context(at=t + 600, commit=False).event == "paid":  # the first call a cold cache compacts
            break
        calls.append(mem.context(at=t))
        times.append(t)
    cold = mem.context(at=t + 600)
    assert cold.event == "paid" and cold.tokens < warm.tokens
    assert _price([*calls, cold], vision, [*times, t + 600]) < _price([*calls, warm], vision, [*times, t + 600])
    mem.add({"role": "user", "content": "and now?"})
    assert mem.context(at=t + 660).event == "append"


@pytest.mark.parametrize("vision,pricing", [("anthropic", "anthropic"), ("openai:gpt-4o", "openai:gpt-4o"),
                                            ("openai:gpt-4.1", "openai:gpt-4.1")])
def test_an_agent_loop_costs_no_more_than_the_conversation_as_it_came(sample, vision, pricing):
    """At the defaults (a budget everything fits), priced by the provider's cache rules."""
    mem = Memory(budget=Budget(tokens=128_000), keep_recent=4, vision=vision)
    plain = Memory(budget=Budget(tokens=128_000), keep_recent=4, vision=vision, cache=False)
    ours, theirs = [], []
    for m in sample:
        mem.add(m)
        plain.add(m)
        if m["role"] == "assistant":
            continue  # a call is made before each assistant turn
        ours.append(mem.context())
        theirs.append(plain.context())
    assert all(c.verbatim for c in theirs)  # it all fits: pass-through
    events = {c.event for c in ours}
    assert "paid" in events
    assert _price(ours, pricing) < _price(theirs, pricing)


@pytest.mark.parametrize("vision", ["anthropic", "openai:gpt-4o"])
def test_at_the_defaults_the_saving_comes_from_pages_not_from_forgetting(sample, vision):
    """Under a budget everything fits (no hard cap reached, under the images cap), no page is
    dropped: a paid compaction images pages, it never forgets them."""
    mem = Memory(budget=Budget(tokens=128_000), keep_recent=4, vision=vision)
    events = []
    for m in sample:
        mem.add(m)
        if m["role"] == "assistant":
            continue
        ctx = mem.context()
        events.append(ctx.event)
        assert not ctx.gone, (ctx.event, len(ctx.gone))
    assert "paid" in events


def _first_paid(sample, **policy) -> int | None:
    """The call (an agent loop's, one per non-assistant turn) of the first paid compaction."""
    # One key for every margin: a page's handle is drawn on it, so memories of random keys hold
    # pages a token apart, and the calls compared would not be the same calls.
    mem = Memory(budget=Budget(tokens=128_000), keep_recent=4, vision="anthropic", key="00" * 16,
                 **{"risk": None, **policy})
    calls = 0
    for m in sample:
        mem.add(m)
        if m["role"] == "assistant":
            continue
        calls += 1
        if mem.context().event == "paid":
            return calls
    return None


def test_a_larger_margin_never_pays_a_compaction_sooner(sample):
    """Until its first paid compaction a memory's calls are the same whatever the margin (the
    conversation as it came, then appends), and a larger margin asks more of each: its first
    paid compaction comes no sooner, and at a margin no bet meets, none comes at all."""
    firsts = [_first_paid(sample, margin=m) for m in (1.0, 1.5, 3.0, 1000.0)]
    assert firsts[0] is not None and firsts[-1] is None
    reached = [f for f in firsts if f is not None]
    assert reached == sorted(reached) and reached[0] < reached[-1], firsts
    with pytest.raises(ConfigError, match="margin"):
        Memory(margin=0.5)


def test_the_first_compaction_bets_on_first_horizon(sample):
    """The first compaction weighs the calls to come as `first_horizon` times the calls so far:
    a longer bet pays it no later, and with none (0) it never comes, nor does any after it."""
    firsts = [_first_paid(sample, first_horizon=h) for h in (4.0, 1.0, 0.25, 0.0)]
    assert firsts[0] is not None and firsts[-1] is None, firsts
    reached = [f for f in firsts if f is not None]
    assert reached == sorted(reached) and reached[0] < reached[-1], firsts
    assert Memory(first_horizon=2.0).policy.first_horizon == 2.0
    with pytest.raises(ConfigError, match="first_horizon"):
        Memory(first_horizon=-1)


def test_the_plan_state_survives_a_reopen(sample, backend):
    spec = backend.spec()
    one = Memory(budget=Budget(tokens=5000), keep_recent=4, store=spec)
    ref = Memory(budget=Budget(tokens=5000), keep_recent=4, key=one.key)  # pages of the same names
    for m in sample[:150]:
        one.add(m)
        ref.add(m)
        a, b = one.context(), ref.context()
        assert [p.key for p in a.pieces] == [p.key for p in b.pieces]
    one.close()
    again = Memory.open(spec)
    for m in sample[150:220]:
        again.add(m)
        ref.add(m)
        a, b = again.context(), ref.context()
        assert (a.event, [p.key for p in a.pieces]) == (b.event, [p.key for p in b.pieces])
    again.close()


def test_a_damaged_plan_state_is_a_compaction_never_trusted(sample, tmp_path):
    spec = tmp_path / "m.db"
    mem = Memory(budget=Budget(tokens=5000), keep_recent=4, store=spec)
    for m in sample[:120]:
        mem.add(m)
        mem.context()
    mem.close()
    import sqlite3

    db = sqlite3.connect(spec)
    db.execute("UPDATE floors SET body = 'garbage' WHERE gate LIKE 'plan%'")
    db.commit()
    db.close()
    again = Memory.open(spec)
    again.add(sample[120])
    assert again.context().event in ("first", "forced", "verbatim")


def test_a_plan_state_stored_before_it_kept_the_time_reads_as_not_known():
    """States written by an optictx that did not keep the last call's time still load (the time
    not known: the cache taken as warm), and the time round-trips."""
    from optictx.planstate import Frozen

    state = Frozen(calls=3, prompt_tokens=1200, at=1733400000.5, asis=5000, spent=9000.5, saved=-120.25, part=7)
    assert Frozen.from_json(state.to_json()) == state
    older = json.loads(state.to_json())
    for later in ("at", "asis", "spent", "saved", "part"):  # kept since; a state from before has none
        del older[later]
    assert Frozen.from_json(json.dumps(older)) == Frozen(calls=3, prompt_tokens=1200)


def test_risk_is_checked_and_kept_with_the_memory(tmp_path):
    """`risk=` is a policy field: checked (ConfigError naming it), stored with the memory and
    read back on a reopen, None (no bound) too; a store from before it reopens at the default."""
    for bad in (-0.5, True, "0", float("nan")):
        with pytest.raises(ConfigError, match="risk"):
            Memory(risk=bad)
    path = tmp_path / "m.db"
    Memory(store=path, risk=0.1).close()
    with Memory.open(path) as again:
        assert again.risk == 0.1 and again.policy.risk == 0.1
    Memory.open(path, risk=None).close()
    with Memory.open(path) as unset:
        assert unset.risk is None


def test_a_policy_field_added_later_leaves_the_state_key_at_its_default():
    """States stored before `risk`, `tools` and `words` existed are found again: unset, they are
    not part of the key. The keys are those optictx stored under before them (golden, pinned)."""
    from optictx.planstate import state_key
    from optictx.policy import Policy

    budget, cost = Budget(tokens=1000), COST_MODELS["anthropic"]
    assert state_key(budget, cost, Policy()) == "plan1:1000:anthropic:8fbcfd71a831"
    assert state_key(budget, cost, Policy(margin=2.0)) == "plan1:1000:anthropic:556ddb852a2a"
    assert state_key(budget, cost, Policy(words=True)) != state_key(budget, cost, Policy())
    assert state_key(budget, cost, Policy(risk=0)) != state_key(budget, cost, Policy())
    assert state_key(budget, cost, Policy(tools=("recall",))) != state_key(budget, cost, Policy())


def test_a_dry_run_leaves_the_state_alone(sample):
    mem = Memory(budget=Budget(tokens=5000), keep_recent=4)
    for m in sample[:100]:
        mem.add(m)
        mem.context()
    before = [p.key for p in mem.context().pieces]
    mem.add(sample[100])
    dry = mem.context(commit=False)
    real = mem.context()
    assert [p.key for p in dry.pieces] == [p.key for p in real.pieces]
    assert real.event in APPENDED and [p.key for p in real.pieces][: len(before)] == before


def _agent_session(draw_sizes, rng):
    """A random agent session: a task, then calls (assistant tool call, tool result) of random
    sizes, now and then a user message."""
    words = ["alpha", "beta", "gamma", "delta", "1234567", "path/to/file.py", "error", "warning", "ok"]
    msgs = [{"role": "system", "content": "You are an agent. " * 50},
            {"role": "user", "content": "Fix the bug in the parser. " * 5}]
    for i, size in enumerate(draw_sizes):
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "run", "arguments": f'{{"n": {i}}}'}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}",
                     "content": "\n".join(" ".join(rng.choice(words) for _ in range(12)) for _ in range(size))})
        if rng.random() < 0.15:
            msgs.append({"role": "user", "content": "Go on. " * rng.randint(1, 30)})
    return msgs


# Derandomized: the bound is what the rule promises, measured by the simulator on the examples
# it draws; the same ten sessions on every run.
@settings(max_examples=10, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(1, 120), min_size=10, max_size=70), seed=st.integers(0, 2**16),
       vision=st.sampled_from(["anthropic", "openai:gpt-4o", "openai:gpt-4.1"]))
def test_at_the_defaults_a_session_costs_at_most_its_lost_bets_more_than_as_it_came(sizes, seed, vision):
    """Property: any agent session, priced by its provider's cache rules, call by call (a call
    before each assistant turn), costs through optictx at the defaults no more than as it came,
    but for what its paid compactions cost on the call they happened. A paid compaction is a bet
    on the calls to come (on Anthropic no compaction is cheaper than appending on the call it
    happens): a session that ends before one pays back loses what it cost, never more."""
    import random

    msgs = _agent_session(sizes, random.Random(seed))
    mem = Memory(budget=Budget(tokens=128_000), vision=vision)
    plain = Memory(budget=Budget(tokens=128_000), vision=vision, cache=False)
    ours, theirs = [], []
    for i, m in enumerate(msgs):
        if m["role"] == "assistant" and i > 0:
            ours.append(mem.context())
            theirs.append(plain.context())
        mem.add(m)
        plain.add(m)
    assert all(c.verbatim for c in theirs)
    bets = sum(max(0.0, _price(ours[: k + 1], vision) - _price(ours[:k], vision)
                   - (_price(theirs[: k + 1], vision) - _price(theirs[:k], vision)))
               for k, c in enumerate(ours) if c.event == "paid")
    assert _price(ours, vision) <= _price(theirs, vision) + bets + 1e-6


def test_to_anthropic_marks_the_stable_boundaries_and_they_stay_put(sample):
    mem = Memory(budget=Budget(tokens=6000), keep_recent=4, vision="anthropic")
    for m in sample[:200]:
        mem.add(m)
    prev = mem.context()
    assert prev.event == "first" and len(prev.breakpoints) <= 4
    system, messages = prev.to_anthropic(cache=True)
    marked = [b for b in [*system, *(b for m in messages for b in m["content"])] if "cache_control" in b]
    assert 2 <= len(marked) <= 4
    last_page = max(i for i, m in enumerate(messages) for b in m["content"] if b["type"] == "image")
    assert any("cache_control" in b for b in messages[last_page]["content"] if b["type"] == "image")
    assert "cache_control" in messages[-1]["content"][-1]  # the whole prompt starts the next one
    mem.add({"role": "user", "content": "Go on with the next step."})  # the first compaction left little room
    ctx = mem.context()
    assert ctx.event == "append" and ctx.breakpoints[:-1] == prev.breakpoints[:-1]
    # Without cache=True nothing is marked and the system prompt is a string, as before.
    plain_system, plain = ctx.to_anthropic()
    assert isinstance(plain_system, str) and not any("cache_control" in b for m in plain for b in m["content"])


@pytest.mark.parametrize(("vision", "tasks", "page"), [("anthropic", None, None), ("openai:gpt-5", None, None),
                                                   ("anthropic", 3, 400), ("gemini", 3, 400),
                                                   ("openai:gpt-4o", 6, 400), ("openai:gpt-4.1", 3, 400)])
def test_a_compaction_made_for_money_drops_no_page(vision, tasks, page):
    """A paid compaction is optional: where the conversation is still small, the pages a
    compaction plans under its cost as it came (its ceiling) may not all fit, and dropping them
    would save money by forgetting. So no paid compaction drops more pages than the context
    before it (the budget's forced ones may). Small pages and a short conversation are where
    that happened; the whole sample, where paid compactions are made."""
    settings = {"tokens_per_page": page} if page else {}
    mem = Memory(budget=Budget(tokens=128_000), keep_recent=4, vision=vision, **settings)
    prev, t, paid = None, 0.0, 0
    for m in sample_conversation(**({"tasks": tasks} if tasks else {})):
        mem.add(m)
        if m["role"] == "assistant":
            continue
        t += 60.0
        ctx = mem.context(at=t)
        paid += ctx.event == "paid"
        if prev is not None and ctx.event not in ("forced", "first"):  # only the budget may drop more
            assert len(ctx.gone) <= len(prev.gone), (t, ctx.event, [p.index for p in ctx.gone])
        prev = ctx
    if page is None:  # (small pages: every call above is the check; a compaction for money dropped pages there)
        assert paid, "the whole sample makes paid compactions, each weighed against the pages it would drop"
