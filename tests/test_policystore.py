"""A reopened memory plans as it was made to: every `Policy` field, each changed from its
default, comes back from the store as it was given (a reopen used to drop the ladder, the
fitter, the factsheet, the cache pricing, the tool names and `words`, silently); a field a store
cannot keep is an error naming it unless given again; a damaged one names the field; and the
plan-state key of a policy is what it was before (a stored state is found after an upgrade)."""

from __future__ import annotations

from dataclasses import fields

import pytest

from optictx import Memory
from optictx.budget import Budget
from optictx.cost import get_cost_model
from optictx.errors import ConfigError, StoreError
from optictx.facts import Factsheet
from optictx.limits import Limits
from optictx.planstate import state_key
from optictx.policy import Policy, keyword
from optictx.promptcache import CACHE_PRICING, CachePricing
from optictx.schedule import AgeLadder, OldestFirst
from optictx.store import open_store
from optictx.tiers import Tier

# One value other than the default for every field: a field added to Policy without one here fails.
CHANGED = {
    "ladder": AgeLadder(steps=((2, Tier.BASE),), rest=Tier.SMALL, hold=1, unsealed=None),
    "fitter": OldestFirst(batch=2, shrink_first=False),
    "factsheet": Factsheet(max_tokens=300, budget_share=0.05, gone_header="Gone:"),
    "sticky": True, "limits": Limits(max_images=12), "verbatim": False, "cache": False, "headroom": 0.5,
    "horizon": 2.0, "first_horizon": 3, "margin": 2.5,
    "pricing": CachePricing("mine", 0.2, 1.5, "breakpoints", 2048, float("inf"), provider="anthropic"),
    "risk": None, "tools": ("mcp__x__search", "mcp__x__recall"), "words": True,
}


def test_every_field_changed_comes_back_from_the_store(tmp_path):
    assert set(CHANGED) == {f.name for f in fields(Policy)}
    given = {keyword(f): CHANGED[f.name] for f in fields(Policy)}
    path = tmp_path / "m.db"
    Memory(store=path, **given).close()
    again = Memory.open(path)
    try:
        for f in fields(Policy):
            assert getattr(again.policy, f.name) == CHANGED[f.name], f.name
    finally:
        again.close()


@pytest.mark.parametrize("name", ["factsheet", "pricing"])
def test_a_registry_value_or_none_comes_back_as_itself(tmp_path, name):
    value = {"factsheet": None, "pricing": CACHE_PRICING["openai:gpt-5"]}[name]
    Memory(store=tmp_path / "m.db", **{name: value}).close()
    again = Memory.open(tmp_path / "m.db")
    assert getattr(again.policy, name) == value
    again.close()


class _MyLadder:
    def tiers(self, n, *, unsealed=0):
        return [Tier.SMALL] * n


def test_a_ladder_of_the_caller_s_own_is_asked_for_again_never_replaced_by_the_default(tmp_path):
    path = tmp_path / "m.db"
    Memory(store=path, ladder=_MyLadder()).close()
    with pytest.raises(ConfigError, match="ladder of its own .*_MyLadder.*give ladder="):
        Memory.open(path)
    again = Memory.open(path, ladder=_MyLadder())
    assert isinstance(again.ladder, _MyLadder)
    again.close()
    again = Memory.open(path, policy=Policy(horizon=4.0))  # a whole policy given: none of the stored fields
    assert again.policy.horizon == 4.0 and isinstance(again.ladder, AgeLadder)
    again.close()


@pytest.mark.parametrize(("name", "value"), [("tools", ["ok", 5]), ("ladder", {"NoSuchLadder": {}}),
                                             ("horizon", "soon"), ("fitter", {"OldestFirst": {"batch": "x"}})])
def test_a_damaged_field_is_an_error_naming_it(tmp_path, name, value):
    path = tmp_path / "m.db"
    Memory(store=path).close()
    store = open_store(path)  # written as a damaged or hand-edited file would hold it
    meta = store.get_meta()
    store.set_meta({**meta, name: value})
    store.close()
    with pytest.raises(StoreError, match=f"damaged settings: {name}"):
        Memory.open(path)


def test_the_plan_state_key_is_what_it_was():
    """Pinned at the key this policy's states were stored under before the fields were declared
    once: a reopen after an upgrade continues the stored prefix."""
    cost, budget = get_cost_model("anthropic"), Budget(tokens=8000)
    assert state_key(budget, cost, Policy()) == "plan1:8000:anthropic:8fbcfd71a831"
    assert state_key(budget, cost, Policy(risk=None, tools=("a_search", "a_recall"), words=True,
                                          ladder=AgeLadder(hold=1))) == "plan1:8000:anthropic:72a3cf05c5ba"
