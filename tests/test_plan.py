"""The planner on its own: a Snapshot made from a packer, no Memory. Its steps are pure."""

from __future__ import annotations

import pytest

from optictx import COST_MODELS, Budget, BudgetError, DropOldest, Policy, Tier
from optictx.factlines import TurnFacts
from optictx.packer import Packer
from optictx.plan import Snapshot, cap_images, never_sharper, plan
from optictx.renderers import Layout, RenderConfig
from optictx.schedule import page_costs
from optictx.tokens import get_tokenizer
from optictx.turns import to_turn


def _snapshot(sample, n=120, keep_recent=4, system=()):
    tok = get_tokenizer()
    packer = Packer(Layout(RenderConfig()), tok, 1000)
    turns = [to_turn(m).model_copy(update={"id": i}) for i, m in enumerate(sample[:n]) if m["role"] != "system"]
    for t in turns[:-keep_recent]:
        packer.add(t)
    recent = tuple(turns[-keep_recent:])
    fixed = tuple(to_turn({"role": "system", "content": s}).model_copy(update={"id": 10_000 + i})
                  for i, s in enumerate(system))
    tokens = {t.id: sum(tok.count(s) for s in t.texts) for t in (*fixed, *recent)}
    by_id = {t.id: t for t in turns}
    return Snapshot(system=fixed, pinned=(), recent=recent, tokens=tokens, pack=packer.view(), count=tok.count,
                    facts=TurnFacts(lambda ids: {i: by_id[i] for i in ids}))


@pytest.mark.parametrize("policy", [Policy(), Policy(fitter=DropOldest(), sticky=True)], ids=["default", "drop"])
@pytest.mark.parametrize("limit", [600, 2000, 8192])
def test_a_plan_from_a_snapshot_fits_and_keeps_sealed_pages_whole(sample, policy, limit):
    snap = _snapshot(sample)
    fitted = plan(snap, Budget(tokens=limit), COST_MODELS["deepseek-ocr"], policy)
    sheet = sum(snap.count(t) for t in fitted.factsheet.values())
    assert fitted.tokens + sheet <= limit
    assert fitted.pages[: len(snap.pack.sealed)] == list(snap.pack.sealed)
    assert [t.rank for t in fitted.tiers] == sorted(t.rank for t in fitted.tiers)


def test_a_plan_is_the_same_for_the_same_snapshot(sample):
    """Two snapshots of the same turns plan alike (nothing random, nothing left over from one
    call to the next), and the plan follows the budget (a smaller one is another plan)."""
    a, b = (plan(_snapshot(sample), Budget(tokens=6000), COST_MODELS["anthropic"], Policy()) for _ in range(2))
    assert (a.cut, a.tiers, dict(a.factsheet)) == (b.cut, b.tiers, dict(b.factsheet))
    small = plan(_snapshot(sample), Budget(tokens=3000), COST_MODELS["anthropic"], Policy())
    assert (small.cut, small.tiers) != (a.cut, a.tiers) and small.tokens <= 3000 < a.tokens


def test_pinned_text_over_the_budget_is_a_budget_error_with_the_shortfall(sample):
    snap = _snapshot(sample, system=["word " * 400])
    with pytest.raises(BudgetError) as err:
        plan(snap, Budget(tokens=100), COST_MODELS["deepseek-ocr"], Policy())
    fixed = sum(snap.turn_tokens(t, COST_MODELS["deepseek-ocr"]) for t in (*snap.system, *snap.pinned))
    assert err.value.shortfall == fixed - 100 > 0


def test_the_cap_and_sticky_steps_return_new_lists():
    costs = page_costs([1000] * 6, COST_MODELS["deepseek-ocr"])
    tiers = [Tier.TINY, Tier.TINY, Tier.SMALL, Tier.SMALL, Tier.BASE, Tier.LARGE]
    before = list(tiers)
    capped = cap_images(tiers, costs, 2)
    assert capped == [Tier.GONE] * 4 + [Tier.BASE, Tier.LARGE] and tiers == before
    last = [Tier.GONE, Tier.GONE, Tier.TINY]  # pages 0 and 1 were dropped last time: they stay dropped
    assert never_sharper(tiers, last) == [Tier.GONE, Tier.GONE, Tier.TINY, *before[3:]] and tiers == before
