"""Model names to cost models: what a request for `claude-sonnet-4` or `gpt-4.1-mini` pays for an
image page, by the rules below (`optictx serve --vision auto`, `optictx bill`)."""

from __future__ import annotations

# (a substring of the lower-cased model name, the cost model): the first match wins, so the more
# specific names come first. Patch-priced OpenAI models (32-px patches; OpenAI's vision docs:
# gpt-4.1-mini, gpt-4.1-nano, o4-mini) before the tile-priced family.
RULES: tuple[tuple[str, str], ...] = (
    ("claude", "anthropic"),
    ("gemini", "gemini"),
    ("qwen2.5-vl", "qwen2.5-vl"),
    ("qwen2_5_vl", "qwen2.5-vl"),
    ("deepseek-ocr-2", "deepseek-ocr-2"),
    ("deepseek-ocr2", "deepseek-ocr-2"),
    ("unlimited-ocr", "unlimited-ocr"),
    ("unlimited_ocr", "unlimited-ocr"),
    ("deepseek-ocr", "deepseek-ocr"),
    ("gpt-4.1-mini", "openai:gpt-4.1-mini"),
    ("gpt-4.1-nano", "openai:gpt-4.1-mini"),
    ("o4-mini", "openai:gpt-4.1-mini"),
    # Named apart for their prompt-cache prices (promptcache.pricing_for): cached input at 0.25x
    # (gpt-4.1) and 0.1x (gpt-5), against gpt-4o's 0.5x.
    ("gpt-4.1", "openai:gpt-4.1"),
    ("gpt-5", "openai:gpt-5"),
    ("gpt-", "openai:gpt-4o"),
    ("chatgpt", "openai:gpt-4o"),
    ("o1", "openai:gpt-4o"),
    ("o3", "openai:gpt-4o"),
)


def cost_model_of(model: str) -> str | None:
    """The cost model's name for a model name (by RULES, the first that matches), or None."""
    name = model.lower()
    return next((cost for key, cost in RULES if key in name), None)
