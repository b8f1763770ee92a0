"""R-SWA for any transformers decoder: a cache whose later tokens see the whole prefix and the last
`window` generated tokens, so it holds at most prefix + window positions however long it decodes.

Built on transformers' own R-SWA layer (`UnlimitedOcrDynamicReferenceSlidingWindowLayer`: prefix
kept, generated tokens in a sliding window). What this module adds is the mask geometry that makes
it exact on stock decoders (Llama, Qwen2, Mistral) as well: the stored rows are presented to the
mask builder as one contiguous sequence, [prefix | window], so padding is looked up at the
prefix's real columns (the stock layer shifts them by the eviction offset, which unmasks the left
padding of a batch) and a windowed mask (Unlimited OCR's) counts the window over generated rows.

Semantics (Unlimited OCR §3.4, vLLM): the prefix is what the prefill saw; a later token at
generated index g sees the prefix and generated tokens g-window+1 .. g (the window counts the
token itself). Keys are cached after RoPE with absolute positions; nothing is re-rotated.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache
from transformers.models.unlimited_ocr.modeling_unlimited_ocr import UnlimitedOcrDynamicReferenceSlidingWindowLayer

from optictx.errors import ConfigError

DEFAULT_WINDOW = 128
_RSWA = "reference_sliding_attention"


class RSWALayer(UnlimitedOcrDynamicReferenceSlidingWindowLayer):
    """One decoder layer's R-SWA cache: prefix rows, then at most `window - 1` generated rows kept
    between steps (the current token makes `window`).

    `windowed_mask`: the model's own mask applies the window (Unlimited OCR does). Stock decoders
    build a plain causal mask, which is exact only for one new token per step after the prefix;
    several at once (assisted or speculative decoding) raise instead of attending too far back.
    """

    # Not registered as a layer type: importing optictx.models must not change what
    # DynamicCache(config) builds. The instance still answers to the name, so Unlimited OCR's
    # generate() declares the prefill length to it as it does to its own layers.
    _layer_type = None

    def __init__(self, window: int = DEFAULT_WINDOW, *, windowed_mask: bool = False) -> None:
        if window < 1:
            raise ConfigError(f"the R-SWA window must be >= 1 generated token, got {window}")
        super().__init__(sliding_window=window)
        self._layer_type = _RSWA
        self.windowed_mask = windowed_mask

    @property
    def window(self) -> int:
        return self.sliding_window

    @property
    def in_prefill(self) -> bool:
        return self.prefill_length is None or self.prefill_cumulative_length < self.prefill_length

    def _window_rows(self) -> int:
        """Generated rows stored between steps."""
        return min(self.cumulative_length, self.sliding_window - 1)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        past_prefix = key_states.shape[-2]
        if self.in_prefill and self.prefill_length is not None:
            past_prefix -= self.prefill_length - self.prefill_cumulative_length
        if past_prefix > 1 and not self.windowed_mask and not (self.in_prefill and self.prefill_length is None):
            raise NotImplementedError(
                f"R-SWA cache: {past_prefix} tokens at once after the prefix; a stock decoder's causal mask cannot "
                "apply the window to them. Decode one token per step (no assisted or speculative decoding), or "
                "declare a longer prefix with cache.set_prefill_length(...) before the first forward."
            )
        keys, values = super().update(key_states, value_states, *args, **kwargs)
        if self.sliding_window == 1 and self.cumulative_length:
            # transformers keeps states[-(window - 1):], which for a window of 1 is all of them
            self.keys, self.values = self.keys[..., :0, :], self.values[..., :0, :]
        return keys, values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        if self.in_prefill:
            return self.prefill_cumulative_length + query_length, 0
        return (self.prefill_length or 0) + self._window_rows() + query_length, 0

    def query_offset(self) -> int:
        """Where this step's queries sit among the rows the mask sees (absolute during prefill)."""
        if self.in_prefill:
            return self.prefill_cumulative_length
        return (self.prefill_length or 0) + self._window_rows()

    def stored_positions(self) -> int:
        """Positions held right now (prefix + generated rows), what the KV memory is made of."""
        window = self.keys.shape[-2] if self.is_initialized and self.keys.dim() == 4 else 0
        return self.prefill_cumulative_length + window

    def batch_repeat_interleave(self, repeats: int) -> None:
        super().batch_repeat_interleave(repeats)
        if self.prefill_cumulative_length > 0:
            self.prefill_keys = self.prefill_keys.repeat_interleave(repeats, dim=0)
            self.prefill_values = self.prefill_values.repeat_interleave(repeats, dim=0)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        if self.prefill_cumulative_length > 0:
            self.prefill_keys = self.prefill_keys[indices, ...]
            self.prefill_values = self.prefill_values[indices, ...]


class RSWACache(Cache):
    """A transformers `Cache` of `RSWALayer`s; pass it as `cache=` (`past_key_values=` before
    transformers 5.24) to `model(...)` or `model.generate(...)`. All R-SWA state lives here,
    never in the caller's slicing."""

    def __init__(self, layers: list[RSWALayer]) -> None:
        super().__init__(layers=layers)

    @property
    def window(self) -> int:
        return self.layers[0].window

    def get_query_offset(self, layer_idx: int = 0) -> int:
        return self.layers[layer_idx].query_offset()

    def set_prefill_length(self, prefill_length: int) -> None:
        """Declare the prefix length before the first forward, when the prefill comes in chunks."""
        for layer in self.layers:
            layer.set_prefill_length(prefill_length)

    @property
    def prefill_length(self) -> int | None:
        return self.layers[0].prefill_length

    def stored_positions(self) -> list[int]:
        """Positions each layer holds now (<= prefix + window - 1 between steps)."""
        return [layer.stored_positions() for layer in self.layers]

    def nbytes(self) -> int:
        """Bytes of K and V held now, over all layers."""
        total = 0
        for layer in self.layers:
            for t in (layer.keys, layer.values, layer.prefill_keys, layer.prefill_values):
                if t is not None:
                    total += t.numel() * t.element_size()
        return total


def _text_config(config: Any) -> Any:
    get_text = getattr(config, "get_text_config", None)
    return get_text(decoder=True) if callable(get_text) else config


def rswa_cache(config: Any, window: int = DEFAULT_WINDOW, *, prefill_length: int | None = None) -> RSWACache:
    """An R-SWA cache for a model with this transformers config (its text decoder's, for a VLM).

    `window`: generated tokens each later token sees, itself included (128, as Unlimited OCR).
    `prefill_length`: the prefix length, needed only if the prefill comes in several forwards;
    otherwise the first forward's tokens are the prefix.
    """
    text = _text_config(config)
    layers = getattr(text, "num_hidden_layers", None)
    if not layers:
        raise ConfigError(f"{type(config).__name__} has no num_hidden_layers: not a decoder config")
    types = getattr(text, "layer_types", None) or []
    others = sorted({t for t in types if t not in ("full_attention", _RSWA)})
    if others:
        raise ConfigError(f"R-SWA replaces full attention; this model also has {', '.join(others)} layers")
    windowed = _RSWA in types  # Unlimited OCR: its own mask applies the window
    cache = RSWACache([RSWALayer(window, windowed_mask=windowed) for _ in range(layers)])
    if prefill_length is not None:
        cache.set_prefill_length(prefill_length)
    return cache


def rswa_mask(prefix: int, total: int, window: int, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """The explicit R-SWA mask over a whole sequence, [batch, 1, total, total] bool (True = seen):
    causal, and a key past the prefix is seen only from the next `window` positions (itself
    included). A full forward with it is the oracle the cache must match.
    """
    q = torch.arange(total)[:, None]
    kv = torch.arange(total)[None, :]
    seen = ((kv <= q) & ((kv < prefix) | (q - kv < window)))[None]
    if attention_mask is not None:  # [batch, total] padding: 0 = never seen
        seen = seen & attention_mask[:, None, :total].bool()
    return seen[:, None]
