"""R-SWA cache oracles on tiny random decoders built from configs (no downloads).

The oracle is a full forward over the whole sequence under the explicit R-SWA mask: the cache
must give the same logits and the same greedy tokens, while holding at most prefix + window.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pip install 'optictx[models]'")
transformers = pytest.importorskip("transformers", reason="pip install 'optictx[models]'")

from optictx.models import rswa_cache, rswa_mask  # noqa: E402

VOCAB = 97


def _config(kind="llama", **kw):
    common = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  pad_token_id=0, eos_token_id=None, bos_token_id=None)
    if kind == "llama":
        return transformers.LlamaConfig(**common, **kw)
    if kind == "qwen2":
        return transformers.Qwen2Config(**common, **kw)
    return transformers.MistralConfig(**common, sliding_window=None, **kw)


def _model(kind="llama", attn="sdpa", seed=0):
    torch.manual_seed(seed)
    cls = {"llama": transformers.LlamaForCausalLM, "qwen2": transformers.Qwen2ForCausalLM,
           "mistral": transformers.MistralForCausalLM}[kind]
    return cls._from_config(_config(kind), attn_implementation=attn).eval()


def _prompt(n, seed=1, batch=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, VOCAB, (batch, n), generator=g)


@torch.no_grad()
def _decode(model, prompt, steps, cache, chunk=None):
    """Greedy decoding one token per step with `cache`; returns (tokens, logits per step)."""
    if chunk:
        for i in range(0, prompt.shape[1], chunk):
            out = model(input_ids=prompt[:, i:i + chunk], cache=cache, use_cache=True)
    else:
        out = model(input_ids=prompt, cache=cache, use_cache=True)
    tokens, logits = [], []
    for _ in range(steps):
        last = out.logits[:, -1]
        logits.append(last)
        tokens.append(last.argmax(-1, keepdim=True))
        out = model(input_ids=tokens[-1], cache=cache, use_cache=True)
    return torch.cat(tokens, 1), logits


@torch.no_grad()
def _oracle(model, prompt, tokens, window):
    """Logits for each decode step by a full forward under the explicit R-SWA mask."""
    prefix, out = prompt.shape[1], []
    for t in range(tokens.shape[1]):
        seq = torch.cat([prompt, tokens[:, :t]], 1)
        mask = rswa_mask(prefix, seq.shape[1], window).expand(seq.shape[0], -1, -1, -1)
        out.append(model(input_ids=seq, attention_mask=mask).logits[:, -1])
    return out


@pytest.mark.parametrize("kind", ["llama", "qwen2", "mistral"])
@pytest.mark.parametrize(("prefix", "window"), [(5, 1), (5, 4), (17, 7), (9, 64)])
def test_decode_equals_full_recompute_under_the_rswa_mask(kind, prefix, window):
    model = _model(kind)
    prompt = _prompt(prefix)
    tokens, logits = _decode(model, prompt, 24, rswa_cache(model.config, window))
    for got, want in zip(logits, _oracle(model, prompt, tokens, window)):
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    assert torch.equal(torch.stack(logits).argmax(-1).T, tokens)  # greedy picks follow the logits


def test_window_matters_and_a_window_past_the_output_is_full_attention():
    model, prompt = _model(), _prompt(6)
    full, _ = _decode(model, prompt, 30, transformers.DynamicCache(config=model.config))
    wide, _ = _decode(model, prompt, 30, rswa_cache(model.config, 64))
    narrow, narrow_logits = _decode(model, prompt, 30, rswa_cache(model.config, 2))
    assert torch.equal(wide, full)
    full_logits = _oracle(model, prompt, narrow, 10**6)  # full attention over the narrow run's tokens
    assert not torch.allclose(narrow_logits[-1], full_logits[-1], atol=1e-3)  # R-SWA is really on


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_left_padded_batch_generates_what_each_prompt_generates_alone(attn):
    model = _model(attn=attn)
    prompts = [_prompt(n, seed=n)[0] for n in (4, 9, 13)]
    width = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):], mask[i, width - len(p):] = p, 1
    kw = dict(max_new_tokens=20, do_sample=False, pad_token_id=0)
    batch = model.generate(ids, attention_mask=mask, cache=rswa_cache(model.config, 5), **kw)
    for i, p in enumerate(prompts):
        alone = model.generate(p[None], cache=rswa_cache(model.config, 5), **kw)
        assert torch.equal(batch[i, width:], alone[0, len(p):])


def test_chunked_prefill_equals_one_shot_prefill():
    model, prompt = _model(), _prompt(19)
    one, one_logits = _decode(model, prompt, 16, rswa_cache(model.config, 4))
    chunked, chunk_logits = _decode(model, prompt, 16, rswa_cache(model.config, 4, prefill_length=19), chunk=5)
    assert torch.equal(one, chunked)
    for a, b in zip(one_logits, chunk_logits):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)


@torch.no_grad()
def test_stored_positions_stay_within_prefix_plus_window_and_positions_stay_absolute():
    model, prompt, window = _model(), _prompt(11), 6
    cache = rswa_cache(model.config, window)
    out = model(input_ids=prompt, cache=cache, use_cache=True)
    held = []
    for _ in range(40):
        out = model(input_ids=out.logits[:, -1:].argmax(-1), cache=cache, use_cache=True)
        held.append(max(cache.stored_positions()))
    assert max(held) == 11 + window - 1 and held[-1] == held[window]  # constant once the window is full
    assert cache.get_seq_length() == 11 + 40  # absolute: RoPE positions keep counting
    dynamic = transformers.DynamicCache(config=model.config)
    _decode(model, prompt, 40, dynamic)
    assert cache.nbytes() < 0.5 * sum(layer.keys.nbytes + layer.values.nbytes for layer in dynamic.layers)


@torch.no_grad()
def test_several_tokens_after_the_prefix_raise_on_a_stock_decoder():
    model, prompt = _model(), _prompt(5)
    cache = rswa_cache(model.config, 4)
    model(input_ids=prompt, cache=cache, use_cache=True)
    with pytest.raises(NotImplementedError, match="one token per step"):
        model(input_ids=_prompt(3, seed=7), cache=cache, use_cache=True)


def test_beam_search_works_and_matches_full_attention_when_the_window_covers_the_output():
    model, prompt = _model(), _prompt(7)
    kw = dict(max_new_tokens=12, num_beams=3, do_sample=False, pad_token_id=0)
    want = model.generate(prompt, **kw)
    got = model.generate(prompt, cache=rswa_cache(model.config, 32), **kw)
    assert torch.equal(got, want)
    narrow = model.generate(prompt, cache=rswa_cache(model.config, 3), **kw)
    assert narrow.shape == want.shape  # beams reorder prefix and window alike


@torch.no_grad()
def test_batch_select_and_repeat_keep_prefix_and_window_together():
    model, prompts = _model(), _prompt(8, batch=3)
    cache = rswa_cache(model.config, 4)
    tokens, _ = _decode(model, prompts, 6, cache)
    cache.batch_select_indices(torch.tensor([0, 2]))
    out = model(input_ids=tokens[[0, 2], -1:], cache=cache, use_cache=True).logits[:, -1]
    alone = rswa_cache(model.config, 4)
    ref_tokens, _ = _decode(model, prompts[[0, 2]], 6, alone)
    assert torch.equal(ref_tokens, tokens[[0, 2]])
    ref = model(input_ids=ref_tokens[:, -1:], cache=alone, use_cache=True).logits[:, -1]
    torch.testing.assert_close(out, ref, atol=2e-5, rtol=1e-4)
    cache.batch_repeat_interleave(2)
    rows = {t.shape[0] for layer in cache.layers for t in (layer.prefill_keys, layer.keys)}
    assert rows == {4}


@torch.no_grad()
def test_crop_inside_the_window_works_and_past_it_raises_clearly():
    model, prompt = _model(), _prompt(6)
    cache = rswa_cache(model.config, 8)
    tokens, _ = _decode(model, prompt, 4, cache)  # 4 generated: inside the window
    cache.crop(-2)
    assert cache.get_seq_length() == 6 + 4 - 2
    got = model(input_ids=tokens[:, 2:3], cache=cache, use_cache=True).logits[:, -1]  # the 3rd again
    seq = torch.cat([prompt, tokens[:, :3]], 1)
    want = model(input_ids=seq, attention_mask=rswa_mask(6, seq.shape[1], 8)).logits[:, -1]
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    past = rswa_cache(model.config, 3)
    _decode(model, prompt, 6, past)
    with pytest.raises(RuntimeError, match="activate_past_recording"):
        past.crop(-2)


def test_unlimited_ocr_decoder_gets_the_same_as_its_own_cache():
    from transformers.models.unlimited_ocr.configuration_unlimited_ocr import UnlimitedOcrTextConfig
    from transformers.models.unlimited_ocr.modeling_unlimited_ocr import UnlimitedOcrTextModel

    config = UnlimitedOcrTextConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                    n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
                                    first_k_dense_replace=1, max_position_embeddings=512, sliding_window=4)
    torch.manual_seed(0)
    model = UnlimitedOcrTextModel._from_config(config, attn_implementation="sdpa").eval()
    prompt, steps = _prompt(9), torch.randint(1, VOCAB, (1, 12), generator=torch.Generator().manual_seed(3))

    @torch.no_grad()
    def run(cache):
        outs = [model(input_ids=prompt, cache=cache, use_cache=True).last_hidden_state[:, -1]]
        for i in range(steps.shape[1]):
            outs.append(model(input_ids=steps[:, i:i + 1], cache=cache, use_cache=True).last_hidden_state[:, -1])
        return torch.stack(outs)

    own = transformers.DynamicCache(config=config)  # transformers' R-SWA layers
    assert type(own.layers[0]).__name__ == "UnlimitedOcrDynamicReferenceSlidingWindowLayer"
    torch.testing.assert_close(run(rswa_cache(config, 4)), run(own), atol=2e-5, rtol=1e-4)
    # Several tokens after the prefix are fine here: the model's own mask applies the window.
    @torch.no_grad()
    def chunks(cache):
        model(input_ids=prompt, cache=cache, use_cache=True)
        return torch.cat([model(input_ids=steps[:, i:i + 3], cache=cache, use_cache=True).last_hidden_state
                          for i in range(0, 12, 3)], 1)

    ours = chunks(rswa_cache(config, 4))
    torch.testing.assert_close(ours, chunks(transformers.DynamicCache(config=config)), atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(ours[:, -1], run(rswa_cache(config, 4))[-1], atol=2e-5, rtol=1e-4)


def test_kv_geometry_from_stock_configs_matches_what_the_cache_holds():
    from optictx import KVGeometry

    model, prompt, window = _model("qwen2"), _prompt(10), 5
    geometry = KVGeometry.from_config(model.config, dtype_bytes=4)  # the tiny model runs in float32
    assert (geometry.layers, geometry.kv_heads, geometry.head_dim) == (2, 2, 16)  # GQA: 2 KV heads of 4
    assert KVGeometry.from_config(_config("mistral", head_dim=32)).head_dim == 32
    cache = rswa_cache(model.config, window)
    _decode(model, prompt, 30, cache)
    # between steps the cache holds the prefix and window - 1 generated rows (the next token is the window's last)
    assert cache.nbytes() == geometry.decode_bytes(10, 30, window=window - 1)


def test_ngram_guard_bans_repeats_in_the_window_but_not_whitelisted_or_prompt_tokens():
    from optictx.models import WindowedNGramGuard, distinct_n

    ids = torch.tensor([[9, 9, 1, 2, 3, 1, 2]])  # prompt [9, 9], then "1 2 3 1 2": next 3 repeats "1 2 3"
    scores = torch.zeros(1, 10)
    banned = WindowedNGramGuard(3, 16)(ids, scores.clone())
    assert banned[0, 3] == -float("inf") and torch.isfinite(banned[0, [0, 1, 2, 4]]).all()
    assert torch.isfinite(WindowedNGramGuard(3, 16, whitelist_token_ids=[3])(ids, scores.clone())).all()
    assert torch.isfinite(WindowedNGramGuard(3, 3)(ids, scores.clone())).all()  # "1 2 3" is out of the window
    prompt_rep = torch.tensor([[1, 2, 3, 7, 1, 2]])  # the repeat is of the prompt's "1 2 3"
    assert WindowedNGramGuard(3, 16)(prompt_rep, scores.clone())[0, 3] == -float("inf")
    assert torch.isfinite(WindowedNGramGuard(3, 16, prompt_length=3)(prompt_rep, scores.clone())).all()
    assert distinct_n([1, 2, 3, 1, 2, 3], 3) == 3 / 4 and distinct_n([1, 2], 3) == 1.0


def test_ngram_guard_stops_a_looping_greedy_decode():
    from optictx.models import WindowedNGramGuard, distinct_n

    model, prompt = _model(seed=4), _prompt(6)
    kw = dict(max_new_tokens=200, do_sample=False, pad_token_id=0)
    plain = model.generate(prompt, cache=rswa_cache(model.config, 32), **kw)[0, 6:].tolist()
    guard = transformers.LogitsProcessorList([WindowedNGramGuard(4, 128, prompt_length=6)])
    guarded = model.generate(prompt, cache=rswa_cache(model.config, 32), logits_processor=guard, **kw)[0, 6:].tolist()
    assert distinct_n(guarded, 4) == 1.0 > distinct_n(plain, 4)  # a random tiny model loops; the guard ends it


def test_cache_for_the_whole_unlimited_ocr_config_uses_its_decoder():
    from transformers.models.unlimited_ocr.configuration_unlimited_ocr import UnlimitedOcrConfig

    config = UnlimitedOcrConfig(text_config={"num_hidden_layers": 3, "sliding_window": 16})
    cache = rswa_cache(config, 16)
    assert len(cache.layers) == 3 and all(layer.windowed_mask for layer in cache.layers)
    assert not any(layer.windowed_mask for layer in rswa_cache(_config(), 16).layers)
    with pytest.raises(ValueError, match="window must be >= 1"):
        rswa_cache(_config(), 0)
    with pytest.raises(ValueError, match="sliding_attention"):
        rswa_cache(transformers.Qwen2Config(num_hidden_layers=2, layer_types=["full_attention", "sliding_attention"],
                                            use_sliding_window=True, sliding_window=8))
