"""The local optical model path on a tiny random Unlimited OCR (no downloads): page views and
their visual tokens, counted the way the cost model charges them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: pip install 'optictx[models]'")
pytest.importorskip("transformers", reason="transformers is not installed: pip install 'optictx[models]'")

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


@pytest.mark.parametrize("tier", IMAGE_TIERS)
def test_views_are_what_transformers_unlimited_ocr_processor_makes(tiny, ctx, tier):
    """Only where torchvision installs (not beside this project's CPU torch, so not in CI): a
    venv with `pip install torch==2.14.1 torchvision==0.29.1 transformers` runs it."""
    pytest.importorskip("torchvision", reason="transformers' UnlimitedOcrImageProcessor needs torchvision")
    from transformers.models.unlimited_ocr.image_processing_unlimited_ocr import UnlimitedOcrImageProcessor
    from transformers.models.unlimited_ocr.processing_unlimited_ocr import UnlimitedOcrProcessor

    seg, processor = ctx.pages[0], UnlimitedOcrProcessor(UnlimitedOcrImageProcessor(), tiny[1])
    ours = views(seg, tier)
    # Gundam: the master, cropped into tiles beside a 1024 global view; the others: a global view
    # at the tier's side, as each mode is run (no crops).
    mode = {} if tier is Tier.GUNDAM else {"crop_to_patches": False, "size": {"height": tier.side, "width": tier.side}}
    theirs = processor(images=[seg.image_at(tier)], text="<image>\nFree OCR.", return_tensors="pt", **mode)
    placeholders = int((theirs["input_ids"] == processor.image_token_id).sum())
    assert placeholders == get_cost_model("unlimited-ocr").page_tokens(tier)
    if tier is Tier.GUNDAM:
        local = torch.stack(list(theirs["pixel_values_local"])).reshape(ours.local.shape)
        assert [list(ours.grid)] == theirs["patches_grid"] and torch.allclose(ours.local, local, atol=1e-6)
        assert (ours.global_view - theirs["pixel_values"][0]).abs().max() <= 2.5 / 127.5  # bicubic both
    else:
        assert ours.local is None and torch.allclose(ours.global_view, theirs["pixel_values"][0], atol=1e-6)


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


@pytest.fixture(scope="module")
def optical(tiny):
    from optictx.models import OpticalModel

    model, tok = tiny
    return OpticalModel(model, tok, window=16)


def _session_memory(tok, sample, n):
    mem = Memory(vision="unlimited-ocr", budget=Budget(tokens=3000), keep_recent=2, tokenizer=tok)
    for m in sample[:n]:
        mem.add(m)
    return mem


def test_build_inputs_puts_one_placeholder_run_per_page_of_its_charged_length(tiny, ctx):
    from optictx.models import build_inputs

    model, tok = tiny
    inputs = build_inputs(ctx, tok, "What was the total?")
    ids = inputs.input_ids[0]
    imaged = [s for s in ctx.pages if s.tier.is_image]
    assert [s.page.digest for s in inputs.pages] == [s.page.digest for s in imaged]
    assert [end - start for start, end in inputs.spans] == [s.tokens for s in imaged]
    assert all((ids[a:b] == inputs.image_token_id).all() for a, b in inputs.spans)
    assert int((ids == inputs.image_token_id).sum()) == sum(s.tokens for s in imaged)  # nothing else is one
    assert tok.decode(ids[inputs.spans[-1][1]:]).endswith("USER: What was the total?\nASSISTANT:")


@pytest.mark.parametrize("limit", [3000, 6000])
def test_between_compactions_the_model_input_is_a_prefix_of_the_next(tiny, sample, limit):
    """The append-only contract for the local model: the ids before the question of call k are
    the first ids of call k+1, so the prefill is the new turns only."""
    from optictx.models import build_inputs

    _, tok = tiny
    mem = Memory(vision="unlimited-ocr", budget=Budget(tokens=limit), keep_recent=2, tokenizer=tok)
    prev, appended = None, 0
    for m in sample[:160]:
        mem.add(m)
        ctx = mem.context()
        inputs = build_inputs(ctx, tok, "What was the total?")
        if prev is not None and ctx.event in ("append", "verbatim"):
            before = prev.input_ids[0, : prev.piece_ends[-2]]  # all but the question
            assert torch.equal(inputs.input_ids[0, : len(before)], before)
            assert inputs.common_prefix(prev) == len(before)
            appended += 1
        prev = inputs
    assert appended > 60


def test_inputs_are_indexed_and_unpacked_like_a_batch_feature(tiny, ctx):
    from optictx.models import build_inputs

    model, tok = tiny
    inputs = build_inputs(ctx, tok, "What was the total?", image_token_id=model.config.image_token_id)
    assert inputs["input_ids"] is inputs.input_ids and inputs["attention_mask"].shape == inputs.input_ids.shape
    assert dict(inputs).keys() == {"input_ids", "attention_mask"}
    out = model.generate(**inputs, max_new_tokens=3, do_sample=False)  # text only: the pages' features are
    assert out.shape[1] <= inputs.length + 3  # written in by OpticalModel, not by generate
    with pytest.raises(KeyError, match="input_ids"):
        inputs["pixel_values"]


def test_memory_to_answer_on_the_tiny_model_with_a_constant_kv_cache(optical, sample):
    mem = _session_memory(optical.tokenizer, sample, 60)
    ctx = mem.context()
    pieces = list(optical.stream(ctx, "What was the total?", max_new_tokens=40))
    assert optical.answer(ctx, "What was the total?", max_new_tokens=40) == "".join(pieces)
    prompt = optical.inputs(ctx, "What was the total?").length
    cache = optical.last_cache
    assert cache.get_seq_length() == prompt + 39  # absolute positions keep counting (the 40th is not fed back)
    assert set(cache.stored_positions()) == {prompt + optical.window - 1}  # but holds prefix + window


@pytest.mark.parametrize("vocab", [None, 4096])
def test_streamed_pieces_are_whole_characters_and_add_up_to_the_decoded_text(vocab):
    from optictx.models import tiny_tokenizer
    from optictx.models.optical import Detokenizer

    tok = tiny_tokenizer(vocab)
    text = "total: 42 €\n第三个测试失败 🧪🔥\nשלום עולם\n  def f(x):\n\treturn x\n" * 3
    ids = tok(text, add_special_tokens=False).input_ids
    stream = Detokenizer(tok)
    pieces = [stream.add(i) for i in ids]
    pieces.append(stream.flush())
    assert "".join(pieces) == tok.decode(ids) == text
    assert not any("\ufffd" in p for p in pieces)  # no half of a character is ever shown
    cut = tok("🧪", add_special_tokens=False).input_ids
    if len(cut) > 1:  # an emoji split over tokens, the stream ending inside it: flushed, not lost
        stream = Detokenizer(tok)
        assert [stream.add(i) for i in cut[:-1]] == [""] * (len(cut) - 1)
        assert stream.flush() == tok.decode(cut[:-1])


def test_each_page_is_encoded_at_most_once_per_tier_over_a_session(sample):
    from optictx.models import OpticalModel

    model, tok = tiny_unlimited_ocr()
    optical = OpticalModel(model, tok, window=16)
    # A budget with room for the newest page at BASE beside the rest, so pages age through three tiers
    mem = Memory(vision="unlimited-ocr", budget=Budget(tokens=4000), keep_recent=2, tokenizer=tok)
    seen = set()
    for m in sample[:90]:
        mem.add(m)
        if m["role"] == "user":  # the agent asks the model once per user turn
            ctx = mem.context()
            optical.embed(optical.inputs(ctx, "next step?"))
            seen |= {(s.page.digest, s.tier) for s in ctx.pages if s.tier.is_image}
    assert len(seen) >= 10 and len({t for _, t in seen}) >= 3  # pages did pass through tiers
    assert set(optical.visual.encodes) == seen
    assert max(optical.visual.encodes.values()) == 1


def test_from_pretrained_loads_a_local_safetensors_folder_and_refuses_incomplete_ones(tmp_path, tiny, ctx):
    from optictx.models import OpticalModel

    model, tok = tiny
    with pytest.raises(FileNotFoundError, match="no such checkpoint folder"):
        OpticalModel.from_pretrained(tmp_path / "nowhere")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"missing \*\.safetensors"):
        OpticalModel.from_pretrained(tmp_path / "half")
    model.save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    assert not list((tmp_path / "ckpt").glob("*.bin"))  # safetensors only
    loaded = OpticalModel.from_pretrained(tmp_path / "ckpt", window=16)
    original = OpticalModel(model, tok, window=16)
    assert loaded.answer(ctx, "total?", max_new_tokens=8) == original.answer(ctx, "total?", max_new_tokens=8)


def test_prefix_kv_reuse_prefills_only_the_new_part_and_answers_the_same(sample):
    from optictx.models import OpticalModel

    model, tok = tiny_unlimited_ocr()
    reuse, fresh = OpticalModel(model, tok, window=16), OpticalModel(model, tok, window=16, reuse_prefix=False)
    mem = _session_memory(tok, sample, 40)
    for m in sample[40:52]:
        mem.add(m)
        ctx = mem.context()
        assert reuse.answer(ctx, "next?", max_new_tokens=6) == fresh.answer(ctx, "next?", max_new_tokens=6)
    assert all(done == total for total, done in fresh.prefills)
    assert sum(done for _, done in reuse.prefills[1:]) < 0.5 * sum(total for total, _ in reuse.prefills[1:])


def test_the_local_model_example_runs_on_the_tiny_model():
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "examples" / "local_model.py"
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "KV held:" in run.stdout and "'vision': 'unlimited-ocr'" in run.stdout


def test_unlimited_ocr_reader_follows_the_readers_protocol(optical, ctx):
    from optictx.models import UnlimitedOcrReader

    reader = UnlimitedOcrReader(optical, max_new_tokens=12)
    seg = ctx.pages[0]
    images = [seg.image_at(Tier.TINY), seg.image_at(Tier.SMALL)]
    texts = reader.read_batch(images, [seg.boxes, None])
    assert all(isinstance(t, str) for t in texts)
    assert reader.read(images[0]) == texts[0]  # cached by pixels: the same text, no second decode
    with pytest.raises(ValueError, match="no page tier"):
        reader.read(seg.image_at(Tier.TINY).crop((0, 0, 100, 50)))


def test_a_visual_cache_smaller_than_one_context_still_serves_it(tiny, ctx):
    from optictx.models import VisualCache

    model, _ = tiny
    imaged = [s for s in ctx.pages if s.tier.is_image]
    small = VisualCache(max_bytes=1)  # holds one entry at most
    first = small.features(model, imaged)
    assert [f.shape[0] for f in first] == [s.tokens for s in imaged]
    assert len(small) == 1 and small.bytes > 0
    again = small.features(model, imaged)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert max(small.encodes.values()) == 2  # evicted pages are encoded again: the bound holds


def test_embedding_from_a_reused_start_matches_the_full_embedding(optical, ctx):
    inputs = optical.inputs(ctx, "total?")
    full = optical.embed(inputs)
    mid = inputs.spans[1][0] + 5  # inside a page's placeholder run
    assert torch.equal(optical.embed(inputs, mid), full[:, mid:])


# -- DeepSeek-OCR 2 (DeepEncoder V2 views from transformers' own torch-free image processor) ------


@pytest.fixture(scope="module")
def tiny2():
    from optictx.models import tiny_deepseek_ocr2

    return tiny_deepseek_ocr2()


@pytest.fixture(scope="module")
def ctx2(sample, tiny2):
    mem = Memory(vision="deepseek-ocr-2", budget=Budget(tokens=6000), keep_recent=2, tokenizer=tiny2[1])
    for m in sample[:60]:
        mem.add(m)
    return mem.context()


@pytest.mark.parametrize("tier", IMAGE_TIERS)
def test_deepseek_ocr2_visual_tokens_per_tier_equal_its_cost_model(tiny2, ctx, tier):
    model, _ = tiny2
    (features,) = encode(model, [views(ctx.pages[0], tier, family="deepseek_ocr2")])
    cost = get_cost_model("deepseek-ocr-2")
    assert features.shape[0] == cost.image_tokens(tier, cost.tier_size(tier))
    assert features.shape[0] == {Tier.TINY: 257, Tier.SMALL: 257}.get(tier, 256 + 4 * 144 + 1)


def test_deepseek_ocr2_answers_with_full_attention_by_default_and_reuses_its_prefix(tiny2, ctx2, sample):
    from transformers import DynamicCache

    from optictx.models import OpticalModel

    model, tok = tiny2
    full, rswa = OpticalModel(model, tok, window=16), OpticalModel(model, tok, window=16, rswa=True)
    assert not full.rswa and rswa.rswa
    imaged = [s for s in ctx2.pages if s.tier.is_image]
    inputs = full.inputs(ctx2, "total?")
    assert [b - a for a, b in inputs.spans] == [s.tokens for s in imaged] and imaged
    answer = full.answer(ctx2, "total?", max_new_tokens=20)
    assert isinstance(full.last_cache, DynamicCache)
    assert full.last_cache.get_seq_length() == inputs.length + 19  # full attention keeps every token fed back
    rswa.answer(ctx2, "total?", max_new_tokens=20)
    assert set(rswa.last_cache.stored_positions()) == {inputs.length + 15}  # prompt + window - 1
    # prefix reuse with a full-attention cache answers as a fresh prefill does
    fresh = OpticalModel(model, tok, window=16, reuse_prefix=False)
    mem = Memory(vision="deepseek-ocr-2", budget=Budget(tokens=6000), keep_recent=2, tokenizer=tok)
    for m in sample[:50]:
        mem.add(m)
    for m in sample[50:56]:
        mem.add(m)
        ctx = mem.context()
        assert full.answer(ctx, "next?", max_new_tokens=6) == fresh.answer(ctx, "next?", max_new_tokens=6)
    assert sum(done for _, done in full.prefills[2:]) < 0.5 * sum(total for total, _ in full.prefills[2:])
    assert answer == OpticalModel(model, tok, window=16).answer(ctx2, "total?", max_new_tokens=20)


def test_a_context_fitted_for_another_model_is_refused(tiny2, ctx):
    from optictx.models import OpticalModel

    model, tok = tiny2
    with pytest.raises(ValueError, match="vision='deepseek-ocr-2'"):
        OpticalModel(model, tok).inputs(ctx, "total?")  # ctx was fitted for unlimited-ocr


def test_from_pretrained_picks_the_class_from_the_checkpoint(tmp_path, tiny2, ctx2):
    from optictx.models import OpticalModel

    model, tok = tiny2
    model.save_pretrained(tmp_path / "ocr2")
    tok.save_pretrained(tmp_path / "ocr2")
    loaded = OpticalModel.from_pretrained(tmp_path / "ocr2")
    assert type(loaded.model) is type(model) and not loaded.rswa
    assert loaded.answer(ctx2, "total?", max_new_tokens=6) == OpticalModel(model, tok).answer(ctx2, "total?",
                                                                                             max_new_tokens=6)
