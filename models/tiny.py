"""A tiny random-weight Unlimited OCR model and a tokenizer built locally: for tests, examples and
benchmarks on a machine with no model hub. Same classes as the real checkpoint, so the visual
token counts, the R-SWA decoder and the cache API are the real ones; the answers are noise."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

IMAGE_TOKEN = "<image>"
SPECIAL_TOKENS = ("<|begin▁of▁sentence|>", "<|end▁of▁sentence|>", "<|pad|>", IMAGE_TOKEN)


def tiny_tokenizer(vocab_size: int | None = None) -> Any:
    """Byte-level with no merges (256 byte tokens, then the special tokens, the image token last),
    or, with `vocab_size`, byte-level BPE trained here (0.1 s) on optictx's sample agent
    conversation and stdlib docstrings: at 4,096 it counts the sample about as cl100k does, where
    bytes count several times as many, so pages, turns and budgets keep real proportions."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size is None:
        core = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(sorted(alphabet))}, merges=[]))
    else:
        core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    if vocab_size is not None:
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=alphabet, show_progress=False)
        core.train_from_iterator(_corpus(), trainer)  # deterministic: same text, same merges
    bos, eos, pad, image = SPECIAL_TOKENS
    tok = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=bos, eos_token=eos, pad_token=pad,
                                  additional_special_tokens=[image])
    tok.image_token = image
    return tok


def _corpus() -> Iterator[str]:
    from optictx.sample import prose_corpus, sample_conversation

    for m in sample_conversation(seed=1):  # not the demo's seed: the benchmarks' text is not trained on
        yield m["content"] or ""
        yield from (c["function"]["arguments"] for c in m.get("tool_calls") or [])
    yield from prose_corpus()


# Shared by both tiny models: a 2-layer SAM (its 16-px patches and two stride-2 convolutions give
# the real geometry: 16 x 16 features for 1024 px) and the decoder's size and special tokens.
_SAM = {"hidden_size": 32, "output_channels": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "window_size": 4,
        "global_attn_indexes": [1], "mlp_dim": 64, "downsample_channels": [16, 32]}
_ENCODER = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2}


def _text(tok: Any) -> dict[str, Any]:
    return {"vocab_size": len(tok), "hidden_size": 64, "intermediate_size": 96, "moe_intermediate_size": 32,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4, "n_routed_experts": 4,
            "num_experts_per_tok": 2, "n_shared_experts": 1, "bos_token_id": tok.bos_token_id,
            "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id}


def tiny_unlimited_ocr(seed: int = 0, vocab_size: int | None = None) -> tuple[Any, Any]:
    """(model, tokenizer): `UnlimitedOcrForConditionalGeneration` with a 2-layer SAM, a 2-layer
    CLIP encoder and a 2-layer MoE decoder (R-SWA window 16), ~0.35M parameters (~0.8M with a
    4,096-token vocabulary), in eval mode. `vocab_size`: see `tiny_tokenizer`."""
    import torch
    from transformers import UnlimitedOcrConfig, UnlimitedOcrForConditionalGeneration

    tok = tiny_tokenizer(vocab_size)
    config = UnlimitedOcrConfig(
        vision_config={"sam_config": _SAM, "encoder_config": _ENCODER},
        text_config={**_text(tok), "first_k_dense_replace": 1, "sliding_window": 16},
        image_token_id=tok.convert_tokens_to_ids(IMAGE_TOKEN),
    )
    torch.manual_seed(seed)
    return UnlimitedOcrForConditionalGeneration._from_config(config).eval(), tok


def tiny_deepseek_ocr2(seed: int = 0, vocab_size: int | None = None) -> tuple[Any, Any]:
    """(model, tokenizer): `DeepseekOcr2ForConditionalGeneration` with a 2-layer SAM, a 2-layer
    query encoder (144 queries per 768-px crop, 256 per 1024-px global view, as the real one) and a
    2-layer MoE decoder, ~0.35M parameters, in eval mode. `vocab_size`: see `tiny_tokenizer`."""
    import torch
    from transformers import DeepseekOcr2Config, DeepseekOcr2ForConditionalGeneration

    tok = tiny_tokenizer(vocab_size)
    config = DeepseekOcr2Config(
        vision_config={"sam_config": _SAM, "encoder_config": {**_ENCODER, "num_key_value_heads": 2, "vocab_size": 16}},
        text_config={**_text(tok), "mlp_layer_types": ["dense", "sparse"]},
        image_token_id=tok.convert_tokens_to_ids(IMAGE_TOKEN),
    )
    torch.manual_seed(seed)
    return DeepseekOcr2ForConditionalGeneration._from_config(config).eval(), tok
