"""Repetition guard for long OCR-style decoding, and the Distinct-n metric it is judged by.

Long transcriptions loop ("| 0 | 0 | 0 |..."). DeepSeek-OCR and Unlimited OCR ban any n-gram that
already occurred in the last `window_size` tokens, except whitelisted tokens (table cell
separators, newlines), the semantics of vLLM's `NGramPerReqLogitsProcessor`. transformers ships
the windowed ban for Unlimited OCR; this adds the whitelist and vLLM's "generated tokens only".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from transformers.models.unlimited_ocr.generation_unlimited_ocr import (
    UnlimitedOcrSlidingWindowNoRepeatNgramLogitsProcessor,
)

from optictx.errors import ConfigError


class WindowedNGramGuard(UnlimitedOcrSlidingWindowNoRepeatNgramLogitsProcessor):
    """Ban the token that would repeat an `ngram_size`-gram seen in the last `window_size` tokens.

    `whitelist_token_ids` are never banned. With `prompt_length` (the input's length, padding
    included) only generated tokens are searched, as vLLM does; without it the prompt counts too,
    as transformers' processor does. Pass it in `generate(logits_processor=[...])`; Unlimited OCR's
    defaults are ngram_size=35, window_size=128 (single page) or 1024 (several).
    """

    def __init__(self, ngram_size: int, window_size: int, whitelist_token_ids: Iterable[int] = (),
                 prompt_length: int | None = None) -> None:
        super().__init__(ngram_size=ngram_size, window_size=window_size)
        self.whitelist = torch.tensor(sorted(set(whitelist_token_ids)), dtype=torch.long)
        self.prompt_length = prompt_length

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        searched = input_ids if self.prompt_length is None else input_ids[:, self.prompt_length:]
        out = super().__call__(searched, scores)
        if self.whitelist.numel():
            keep = self.whitelist.to(scores.device)
            out[:, keep] = scores[:, keep]
        return out


def distinct_n(tokens: Sequence[Any], n: int) -> float:
    """Distinct n-grams / all n-grams of `tokens` (1.0: no n-gram repeats; the Unlimited OCR paper
    reports Distinct-35 over long transcriptions). 1.0 for a sequence shorter than n."""
    if n < 1:
        raise ConfigError(f"n must be >= 1, got {n}")
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return len(set(grams)) / len(grams) if grams else 1.0
