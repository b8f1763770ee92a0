"""Cost formulas pinned against the published numbers (providers' docs, DeepSeek-OCR's code)."""

import pytest

from optictx import COST_MODELS, Tier, get_cost_model
from optictx.cost import DeepSeekOCR, QwenVL


@pytest.mark.parametrize(("tier", "positions", "paper"), [
    (Tier.TINY, 73, 64), (Tier.SMALL, 111, 100), (Tier.BASE, 273, 256), (Tier.LARGE, 421, 400),
    (Tier.GUNDAM, 693, 656),
])
def test_deepseek_ocr_positions_and_paper_tokens(tier, positions, paper):
    for name in ("deepseek-ocr", "unlimited-ocr"):
        m = get_cost_model(name)
        assert m.page_tokens(tier) == positions
        assert m.paper_tokens(tier, m.tier_size(tier)) == paper


@pytest.mark.parametrize(("size", "positions"), [
    ((1240, 1754), 903), ((1920, 1080), 483), ((3000, 400), 883), ((400, 3000), 933), ((600, 500), 273),
])
def test_deepseek_ocr_gundam_grids_from_reference(size, positions):
    assert get_cost_model("deepseek-ocr").image_tokens(Tier.GUNDAM, size) == positions


def test_deepseek_ocr_gundam_with_nine_crops():
    m = DeepSeekOCR("hf", max_crops=9)
    assert m.image_tokens(Tier.GUNDAM, (1920, 1080)) == 1093  # (4,2) via the tie-break
    assert m.image_tokens(Tier.GUNDAM, (1900, 1900)) == 1203  # tie (2,2)/(3,3) -> 3x3 for large images
    assert m.image_tokens(Tier.GUNDAM, (1280, 1280)) == 693  # our page stays 2x2 (below the tie-break area)


def test_deepseek_ocr2():
    m = get_cost_model("deepseek-ocr-2")
    assert m.page_tokens(Tier.SMALL) == 257  # <= 768: global view only
    assert m.page_tokens(Tier.LARGE) == 256 + 144 * 4 + 1
    assert m.paper_tokens(Tier.LARGE, (1280, 1280)) == 832
    assert m.image_tokens(Tier.LARGE, (1280, 3000)) == 256 + 144 * 2 + 1  # aspect 0.43 -> closest grid 1x2


def test_openai_tiles_worked_examples():
    m = get_cost_model("openai:gpt-4o")
    assert m.image_tokens(Tier.LARGE, (595, 842)) == 765  # an A4 page at 72 dpi, by OpenAI's tile rule
    assert m.image_tokens(Tier.LARGE, (793, 1123)) == 1105
    assert m.page_tokens(Tier.LARGE) == 765  # 1280 -> 768 -> 2x2 tiles
    assert m.page_tokens(Tier.TINY) == 255  # one tile
    assert get_cost_model("openai:gpt-4o:low").page_tokens(Tier.LARGE) == 85
    assert m.image_detail == "high"


def test_openai_patches_worked_examples():
    m = get_cost_model("openai:gpt-4.1-mini")
    assert m.image_tokens(Tier.LARGE, (595, 842)) == 832
    assert m.image_tokens(Tier.LARGE, (793, 1123)) == 1458
    assert m.patches((1800, 2400)) == 1452  # OpenAI's own example of the shrink rule
    assert m.patches((1280, 1280)) <= 1536


def test_anthropic_worked_examples():
    m = get_cost_model("anthropic")
    assert m.image_tokens(Tier.LARGE, (595, 842)) == 668
    assert m.image_tokens(Tier.LARGE, (793, 1123)) == 1188
    assert m.image_tokens(Tier.LARGE, (1092, 1092)) == 1590
    assert m.page_tokens(Tier.LARGE) == 1590  # 1280 is scaled to 1092 first
    assert m.page_tokens(Tier.SMALL) == 547  # ceil(640*640/750): "~520 tokens" class


def test_gemini_worked_examples():
    m = get_cost_model("gemini")
    assert m.image_tokens(Tier.LARGE, (595, 842)) == 516
    assert m.image_tokens(Tier.LARGE, (793, 1123)) == 1032
    assert m.image_tokens(Tier.TINY, (384, 384)) == 258


def test_qwen_worked_examples():
    m = get_cost_model("qwen2.5-vl")
    assert m.paper_tokens(Tier.LARGE, (595, 842)) == 630
    assert m.paper_tokens(Tier.LARGE, (793, 1123)) == 1120
    assert m.image_tokens(Tier.LARGE, (595, 842)) == 632  # + vision_start / vision_end
    assert m.paper_tokens(Tier.LARGE, (5000, 5000)) <= 1280  # max_pixels clamp
    assert QwenVL("q").paper_tokens(Tier.TINY, (20, 20)) >= 4  # min_pixels clamp


def test_unknown_vision_lists_valid_names():
    with pytest.raises(ValueError, match="deepseek-ocr.*anthropic"):
        get_cost_model("gpt-9")


def test_every_registry_entry_prices_every_tier():
    for m in COST_MODELS.values():
        for t in (Tier.GUNDAM, Tier.LARGE, Tier.BASE, Tier.SMALL, Tier.TINY):
            assert m.page_tokens(t) > 0


@pytest.mark.parametrize("model,vision", [
    ("claude-opus-4-1-20250805", "anthropic"), ("claude-3-haiku", "anthropic"), ("gemini-2.5-pro", "gemini"),
    ("Qwen/Qwen2.5-VL-72B-Instruct", "qwen2.5-vl"), ("qwen2_5_vl", "qwen2.5-vl"),
    ("deepseek-ai/DeepSeek-OCR", "deepseek-ocr"), ("deepseek-ai/DeepSeek-OCR-2", "deepseek-ocr-2"),
    ("deepseek-ocr2", "deepseek-ocr-2"), ("unlimited_ocr", "unlimited-ocr"), ("gpt-4.1-mini-2025-04-14",
    "openai:gpt-4.1-mini"), ("gpt-4.1-nano", "openai:gpt-4.1-mini"), ("o4-mini", "openai:gpt-4.1-mini"),
    ("gpt-4.1", "openai:gpt-4.1"), ("gpt-5-codex", "openai:gpt-5"), ("gpt-5-mini", "openai:gpt-5"),
    ("gpt-4o-mini", "openai:gpt-4o"), ("chatgpt-4o-latest", "openai:gpt-4o"), ("o3-mini", "openai:gpt-4o"),
    ("o1-preview", "openai:gpt-4o"), ("my-local-llm", None)])
def test_a_model_name_pays_as_the_profile_whose_pattern_it_matches_longest(model, vision):
    from optictx.cost import vision_of_model

    assert vision_of_model(model) == vision


def test_every_profile_is_complete_and_its_cache_rules_exist():
    from optictx.cost import PROFILES
    from optictx.promptcache import CACHE_PRICING, pricing_for

    for name, profile in PROFILES.items():
        assert profile.name == name and COST_MODELS[name] is profile.cost
        assert profile.cache in CACHE_PRICING and pricing_for(name) is CACHE_PRICING[profile.cache]
    assert pricing_for("openai:gpt-4.1-mini").read == 0.25 and pricing_for("anthropic").write == 1.25
    assert pricing_for("a-custom-local-model").mode == "prefill"
    assert PROFILES["deepseek-ocr"].kv is not None and PROFILES["anthropic"].kv is None
