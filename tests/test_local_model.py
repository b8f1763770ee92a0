"""The local optical model path on a tiny random Unlimited OCR (no downloads): page views and
their visual tokens, counted the way the cost model charges them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from optictx import Budget, Memory, Tier, get_cost_model  # noqa: E402
from optictx.models import encode, tiny_unlimited_ocr, views  # noqa: E402

IMAGE_TIERS = (Tier.TINY, Tier.SMALL, Tier.BASE, Tier.LARGE, Tier.GUNDAM)


@pytest.fixture(scope="module")
def tiny():
    return tiny_unlimited_ocr()


@pytest.fixture(scope="module")
def ctx(sample):
    mem = Memory(vision="unlimited-ocr", budget=Budget(tokens=6000), keep_recent=2)
    for m in sample:
        mem.add(m)
    return mem.context()


def test_tiny_model_and_tokenizer_register_the_image_token(tiny):
    model, tok = tiny
    ids = tok("page <image> here", add_special_tokens=False).input_ids
    assert ids.count(model.config.image_token_id) == 1
    assert tok.decode(ids) == "page <image> here"
    assert sum(p.numel() for p in model.parameters()) < 1_000_000


@pytest.mark.parametrize("tier", IMAGE_TIERS)
def test_visual_tokens_per_tier_equal_the_cost_model(tiny, ctx, tier):
    model, _ = tiny
    seg = ctx.pages[0]
    (features,) = encode(model, [views(seg, tier)])
    cost = get_cost_model("unlimited-ocr")
    assert features.shape == (cost.image_tokens(tier, cost.tier_size(tier)), model.config.text_config.hidden_size)
    assert features.shape[0] == {Tier.TINY: 73, Tier.SMALL: 111, Tier.BASE: 273, Tier.LARGE: 421,
                                 Tier.GUNDAM: 273 + 10 * 2 * (10 * 2 + 1)}[tier]


def test_a_scheduled_context_encodes_to_exactly_its_page_tokens(tiny, ctx):
    model, _ = tiny
    imaged = [s for s in ctx.pages if s.tier.is_image]
    assert len({s.tier for s in imaged}) >= 2  # mixed tiers: several encoder batches
    features = encode(model, [views(s) for s in imaged])
    assert [f.shape[0] for f in features] == [s.tokens for s in imaged]


def test_text_pages_have_no_views(ctx):
    seg = ctx.pages[0]
    with pytest.raises(ValueError, match="TEXT page has no image"):
        views(seg, Tier.TEXT)
