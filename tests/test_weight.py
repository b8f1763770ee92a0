"""A context never weighs more than its consumer takes in one request (`CostModel.max_request_bytes`,
`optictx/weight.py`): the oracle is the request the exporter writes, measured in bytes."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from optictx import Memory
from optictx.cost import get_cost_model


def _turn(rng: random.Random, i: int) -> dict:
    """A turn of dense, distinct text: its pages do not compress to nothing."""
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "kappa", "lambda", "sigma"]
    lines = (f"{i}:{j} " + " ".join(rng.choice(words) + str(rng.randint(0, 999)) for _ in range(12))
             for j in range(60))
    return {"role": "user" if i % 2 == 0 else "assistant", "content": "\n".join(lines)}


def _request_bytes(ctx) -> int:
    return len(json.dumps(ctx.to_openai()).encode())


@pytest.mark.parametrize("cache", [True, False])
def test_a_context_never_weighs_more_than_a_request_may(cache):
    cap = 500_000
    capped = replace(get_cost_model("deepseek-ocr"), max_request_bytes=cap)
    free, bounded = (Memory(budget=60_000, vision=v, cache=cache) for v in (get_cost_model("deepseek-ocr"), capped))
    rng = random.Random(7)
    weights = []
    for i in range(56):
        turn = _turn(rng, i)
        free.add(turn)
        bounded.add(turn)
        if i % 8 == 7:
            ctx = bounded.context()
            weights.append(_request_bytes(ctx))
            shown = [p.page.index for p in ctx.pages if p.tier.is_image]
            assert all(g.index < min(shown) for g in ctx.gone), "the oldest pages give way first"
    assert max(weights) <= cap, weights
    unbounded = free.context()
    assert _request_bytes(unbounded) > 5 * cap  # the bound is what kept it small
    assert max(weights) > cap // 2  # and it keeps as many pages as fit, not none
    assert turn["content"] in [s.text for s in ctx.text_segments]  # the newest turn still goes as text


def test_the_providers_limits_are_the_documented_ones():
    # Anthropic: "Images and vision", 32 MB a request; OpenAI's vision guide: 50 MB of images.
    assert get_cost_model("anthropic").max_request_bytes == 32_000_000
    assert get_cost_model("openai:gpt-4o").max_request_bytes == 50_000_000
    assert get_cost_model("deepseek-ocr").max_request_bytes is None  # a local model: no request to refuse


def test_a_limit_the_text_alone_is_over_gives_up_its_pages_and_stops():
    """Nothing can bring it within: every page gives way, and the planner stops trying."""
    tiny = replace(get_cost_model("deepseek-ocr"), max_request_bytes=1_000)
    mem = Memory(budget=60_000, vision=tiny)
    rng = random.Random(1)
    for i in range(24):
        mem.add(_turn(rng, i))
    ctx = mem.context()
    assert not [p for p in ctx.pages if p.tier.is_image] and ctx.gone
