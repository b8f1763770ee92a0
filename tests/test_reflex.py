"""The reflex reader: its file (ternary, no pickle), its numpy forward pass against the torch
network it was trained as, its CTC scoring, and a seeded training run that repeats itself."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optictx import ConfigError
from optictx.models import ctc, reflex
from optictx.models.ctc import beam, ctc_logprob, ctc_logprobs, greedy
from optictx.models.reflex import CHARSET, ReflexError, ReflexModel, batch_of
from optictx.models.reflexfile import pack_ternary, save, unpack_ternary


def test_ternary_weights_pack_four_to_a_byte_and_come_back():
    rng = np.random.default_rng(0)
    for shape in [(1,), (3, 5), (16, 1, 3, 3), (7, 11, 3)]:
        t = rng.integers(-1, 2, size=shape).astype(np.int8)
        packed = pack_ternary(t)
        assert packed.dtype == np.uint8 and len(packed) == -(-t.size // 4)
        assert (unpack_ternary(packed, shape) == t).all()


def _tiny_model(tmp_path, rng):
    layers = [{"kind": "conv2d", "relu": True, "pool": [2, 2], "residual": False,
               "ternary": rng.integers(-1, 2, size=(4, 1, 3, 3)), "scale": np.full(4, 0.5), "bias": np.zeros(4)},
              {"kind": "conv1d", "relu": False, "pool": None, "residual": False,
               "ternary": rng.integers(-1, 2, size=(len(CHARSET) + 1, 32, 1)), "scale": np.full(96, 0.1),
               "bias": np.zeros(96)}]
    path = tmp_path / "m.npz"
    save(path, layers, {"seed": 0})
    return path


def test_a_model_file_loads_without_pickle_and_reads_a_batch(tmp_path):
    path = _tiny_model(tmp_path, np.random.default_rng(1))
    model = ReflexModel.load(path)
    lines = [np.random.default_rng(2).random((16, w)).astype(np.float32) for w in (40, 64)]
    logp = model.logits(batch_of(lines))
    assert logp.shape == (2, 32, len(CHARSET) + 1)
    assert np.allclose(np.exp(logp).sum(axis=2), 1.0, atol=1e-4)


def test_damaged_foreign_and_pickled_files_are_refused_by_name(tmp_path):
    path = _tiny_model(tmp_path, np.random.default_rng(1))
    cut = tmp_path / "cut.npz"
    cut.write_bytes(path.read_bytes()[:200])
    with pytest.raises(ReflexError, match="cut.npz"):
        ReflexModel.load(cut)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, meta=np.array([{"format": "optictx-reflex/1"}], dtype=object))
    with pytest.raises(ReflexError, match="pickled.npz"):  # an object array needs pickle: never loaded
        ReflexModel.load(pickled)
    other = tmp_path / "other.npz"
    np.savez(other, meta=np.frombuffer(b'{"format": "something/9"}', dtype=np.uint8))
    with pytest.raises(ReflexError, match="format 'something/9'"):
        ReflexModel.load(other)
    with pytest.raises(ReflexError, match="missing.npz"):
        ReflexModel.load(tmp_path / "missing.npz")


def _rewritten(tmp_path, source, name="bad.npz", meta=None, **arrays):
    """`source` with its meta edited by `meta(m)` and some arrays replaced."""
    import json

    with np.load(source) as f:
        out = {k: f[k] for k in f.files}
    m = json.loads(bytes(out["meta"]).decode())
    if meta is not None:
        meta(m)
    out["meta"] = np.frombuffer(json.dumps(m).encode(), dtype=np.uint8)
    out.update(arrays)
    path = tmp_path / name
    np.savez(path, **out)
    return path


def _set(path, value):
    def edit(m):
        *head, last = path
        node = m
        for k in head:
            node = node[k]
        node[last] = value
    return edit


@pytest.mark.parametrize("edit, arrays, field", [
    (None, {"b0": np.zeros(3, np.float16)}, "b0"),  # a bias of the wrong length
    (None, {"s1": np.full(96, np.nan, np.float16)}, "s1"),  # NaN scales: every page illegible
    (None, {"s0": np.full(4, np.inf, np.float16)}, "s0"),
    (_set(["height"], 0), {}, "height"),
    (_set(["height"], 10**6), {}, "height"),
    (_set(["widen"], 1e9), {}, "widen"),
    (_set(["widen"], 0), {}, "widen"),
    (_set(["layers", 0, "pool"], [0, 2]), {}, "layers[0].pool"),
    (_set(["layers", 0, "pool"], [2, 2, 2]), {}, "layers[0].pool"),
    (_set(["layers", 0, "kind"], "attention"), {}, "layers[0].kind"),
    (_set(["layers", 1, "shape"], [200, 32, 1]),  # more classes than the charset
     {"w1": pack_ternary(np.zeros((200, 32, 1))), "s1": np.ones(200, np.float16), "b1": np.zeros(200, np.float16)},
     "200"),
    (_set(["layers", 1, "shape"], [96, 31, 1]), {}, "layers[1].shape[1]"),
    (_set(["layers", 0, "shape"], [4, 1, 4, 4]), {}, "layers[0].shape"),
    (_set(["layers", 0, "residual"], True), {}, "layers[0].residual"),
    (_set(["layers", 0, "relu"], "yes"), {}, "layers[0].relu"),
    (_set(["layers", 1, "dilation"], 0), {}, "layers[1].dilation"),
    (_set(["layers"], []), {}, "layers"),
    (_set(["charset"], "abc"), {}, "charset"),
    (None, {"lm": np.full((96, 96), np.nan, np.float16)}, "lm"),
    (None, {"w0": np.zeros(3, np.uint8)}, "w0"),
])
def test_a_model_file_that_means_nothing_is_refused_by_field(tmp_path, edit, arrays, field):
    path = _rewritten(tmp_path, _tiny_model(tmp_path, np.random.default_rng(1)), meta=edit, **arrays)
    with pytest.raises(ReflexError) as err:
        ReflexModel.load(path)
    assert field in str(err.value) and "bad.npz" in str(err.value)


def test_a_small_file_that_inflates_to_gigabytes_is_refused_before_inflating(tmp_path):
    import zipfile

    bomb = tmp_path / "bomb.npz"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z, z.open("w0.npy", "w", force_zip64=True) as f:
        chunk = bytes(2**24)
        for _ in range(2**31 // len(chunk)):
            f.write(chunk)
    assert bomb.stat().st_size < 4 * 2**20
    with pytest.raises(ReflexError, match="inflates to"):
        ReflexModel.load(bomb)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layer=st.integers(0, 1), key=st.sampled_from(["kind", "shape", "pool", "dilation", "residual", "relu"]),
       value=st.one_of(st.none(), st.booleans(), st.integers(-3, 300), st.floats(), st.text(max_size=5),
                       st.lists(st.integers(-2, 200), max_size=5)))
def test_any_edit_of_a_layer_loads_a_model_that_reads_or_is_refused(tmp_path, layer, key, value):
    path = _rewritten(tmp_path, _tiny_model(tmp_path, np.random.default_rng(1)),
                      meta=_set(["layers", layer, key], value))
    try:
        model = ReflexModel.load(path)
    except ReflexError:
        return
    lines = [np.random.default_rng(2).random((16, w)).astype(np.float32) for w in (40, 64)]
    logp = model.logits(batch_of(lines))  # what loads, reads: no raw exception at read time
    assert logp.shape[2] == len(CHARSET) + 1 and np.isfinite(logp).all()


def test_ctc_forward_probability_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    z = rng.normal(size=(20, len(CHARSET) + 1)).astype(np.float32)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    for text in ("a", "hello", "aa b", ""):
        ours = ctc_logprob(logp, text)
        target = torch.tensor([[CHARSET.index(c) + 1 for c in text]], dtype=torch.long)
        theirs = -torch.nn.functional.ctc_loss(torch.from_numpy(logp)[:, None], target, torch.tensor([20]),
                                                torch.tensor([len(text)]), reduction="sum").item()
        assert ours == pytest.approx(theirs, abs=1e-3), text


def test_greedy_decoding_merges_repeats_and_drops_blanks():
    frames = [0, 8, 8, 0, 8, 0, 0, 9, 9]  # blank, 'h'... as class indices
    logp = np.full((len(frames), len(CHARSET) + 1), -20.0, dtype=np.float32)
    logp[np.arange(len(frames)), frames] = 0.0
    text, conf = greedy(logp)
    assert text == CHARSET[7] * 2 + CHARSET[8] and conf == pytest.approx(1.0, abs=1e-3)


def test_the_exported_ternary_model_reads_as_the_torch_network_does(tmp_path):
    torch = pytest.importorskip("torch")
    from optictx.models import reflex_train

    lines = reflex_train.drawn_lines(4, seed=0)
    assert {"LARGE", "BASE", "SMALL", "TINY"} <= set(lines.tiers)
    assert all(ch in CHARSET for t in lines.texts for ch in t)
    net = reflex_train.train(lines, steps=3, seed=0, log=lambda m: None)
    path = tmp_path / "r.npz"
    save(path, net.export(), {"seed": 0})
    x = batch_of([im.astype(np.float32) / 255 for im in lines.images[:6]])
    with torch.no_grad():
        theirs = net(torch.from_numpy(x)).permute(1, 0, 2).numpy()
    assert np.abs(ReflexModel.load(path).logits(x) - theirs).max() < 0.05  # float16 scales on disk


def test_a_seeded_training_run_repeats_itself_byte_for_byte(tmp_path):
    pytest.importorskip("torch")
    from optictx.models import reflex_train

    out = [reflex_train.run(tmp_path / f"r{k}.npz", pages=4, steps=4, seed=7, threads=1, log=lambda m: None)
           for k in range(2)]
    a, b = (dict(np.load(p, allow_pickle=False)) for p in out)
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a if k != "meta")


def test_beam_search_ranks_by_the_ctc_probability_and_agrees_with_the_forward_algorithm():
    rng = np.random.default_rng(4)
    z = rng.normal(size=(12, len(CHARSET) + 1)).astype(np.float32) * 3
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    best = beam(logp, width=16, prune=-1e9)
    assert [s for _, s in best] == sorted((s for _, s in best), reverse=True)
    for text, score in best[:5]:  # a prefix's beam score is its full CTC probability
        assert score == pytest.approx(ctc_logprob(logp, text), abs=1e-4), text
    greedy_text, _ = greedy(logp)
    assert ctc_logprob(logp, best[0][0]) >= ctc_logprob(logp, greedy_text) - 1e-6


@pytest.mark.parametrize("engine", ["torch", "numpy"])
def test_the_batched_forward_algorithm_equals_the_one_line_one(engine, monkeypatch):
    if engine == "numpy":
        monkeypatch.setattr(ctc, "torch_or_none", lambda: None)
    rng = np.random.default_rng(5)
    z = rng.normal(size=(4, 15, len(CHARSET) + 1)).astype(np.float32)
    logp = z - np.log(np.exp(z).sum(axis=2, keepdims=True))
    texts, frames = ["ab", "", "zzz", "aaaa"], [15, 9, 12, 6]  # "aaaa" needs 7 frames: impossible in 6
    batched = ctc_logprobs(logp, texts, frames)
    for i in range(4):
        assert batched[i] == pytest.approx(ctc_logprob(logp[i, : frames[i]], texts[i]), abs=1e-4)
    assert batched[3] == -np.inf


def test_numpy_and_torch_forward_passes_agree(tmp_path):
    pytest.importorskip("torch")
    model = ReflexModel.load(_tiny_model(tmp_path, np.random.default_rng(6)))
    x = batch_of([np.random.default_rng(7).random((16, w)).astype(np.float32) for w in (40, 64, 13)])
    assert np.abs(model._logits_numpy(x) - model.logits(x)).max() < 1e-3


def test_the_shipped_reader_reads_held_out_pages_at_every_tier(sample):
    # Held-out text: the shipped agent sample (its prose, code and tool output), which training
    # never saw (it trains on generated text). Floors set a few points under what it measured.
    from optictx import Memory, Tier
    from optictx.models import ReflexReader
    from optictx.readers import char_accuracy

    reader = ReflexReader()
    mem = Memory(keep_recent=0)
    for m in sample[:120]:
        mem.add(m)
    pages = [p for p in mem.pages if p.sealed][1:3]
    floors = dict.fromkeys((Tier.LARGE, Tier.BASE, Tier.SMALL, Tier.TINY), 0.97)  # measured 99.3-99.4%
    for tier, floor in floors.items():
        accuracy = np.mean([char_accuracy(p.text, reader.read(mem.images.at(p, tier), mem.images.boxes(p, tier)))
                            for p in pages])
        assert accuracy >= floor, (tier, accuracy)
    lines = reader.lines(mem.images.at(pages[0], Tier.SMALL), mem.images.boxes(pages[0], Tier.SMALL))
    assert all(0.0 <= c <= 1.0 for _, c in lines)


def test_the_character_language_model_breaks_a_tie_the_pixels_leave():
    lm = ctc.char_lm(["all tall ball", "call fall"])
    assert lm.shape == (len(CHARSET) + 1, len(CHARSET) + 1)
    assert np.allclose(np.exp(lm[:, 1:]).sum(axis=1), 1.0)
    idx = {ch: CHARSET.index(ch) + 1 for ch in "a1l"}
    logp = np.full((3, len(CHARSET) + 1), -20.0, dtype=np.float32)
    logp[0, idx["a"]] = 0.0
    logp[1, idx["1"]], logp[1, idx["l"]] = np.log(0.52), np.log(0.48)  # "1" a shade likelier in the pixels
    logp[2, 0] = 0.0
    assert beam(logp, width=4)[0][0] == "a1"
    best = beam(logp, width=4, lm=lm, alpha=1.0)
    assert best[0][0] == "al"  # after "a", "l" is what the text says
    assert best[0][1] == pytest.approx(ctc_logprob(logp, "al"), abs=1e-4)  # scores stay the pixels' own


def test_a_language_model_weight_needs_a_model_with_one(tmp_path):
    path = _tiny_model(tmp_path, np.random.default_rng(1))
    with pytest.raises(ReflexError, match="no language model"):
        reflex.ReflexReader(path, lm_weight=0.5)
    with_lm = tmp_path / "lm.npz"
    with np.load(path) as f:
        arrays = dict(f)
    np.savez(with_lm, **arrays, lm=ctc.char_lm(["some text"]).astype(np.float16))
    assert np.allclose(reflex.ReflexReader(with_lm, lm_weight=0.5).model.lm, ctc.char_lm(["some text"]), atol=1e-2)
    np.savez(with_lm, **arrays, lm=np.zeros((3, 3), dtype=np.float16))
    with pytest.raises(ReflexError, match="language model of shape"):
        ReflexModel.load(with_lm)


def test_two_stretches_of_a_line_align_frame_to_frame_and_fuse():
    rng = np.random.default_rng(7)
    z = rng.normal(size=(30, len(CHARSET) + 1)).astype(np.float32) * 4
    a = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    wide = np.repeat(a, 2, axis=0)[:-3]  # the same reading, each frame twice (a line drawn twice as wide)
    path = ctc.align(a, wide)
    assert path[0] == 0 and path[-1] == len(wide) - 1 and (np.diff(path) >= 0).all()
    assert (np.abs(path[1:-2] // 2 - np.arange(1, 28)) <= 1).all()  # frame i meets frame 2i (or 2i+1)
    assert np.allclose(ctc.fuse(a, a), a, atol=1e-5)  # a reading fused with itself is itself
    fused = ctc.fuse(a, wide)
    assert fused.shape == a.shape and np.allclose(np.exp(fused).sum(axis=1), 1.0, atol=1e-4)


def test_the_reader_refuses_stretches_it_cannot_draw():
    with pytest.raises(ConfigError, match="stretches"):
        reflex.ReflexReader(stretches=())
    with pytest.raises(ConfigError, match="stretches"):
        reflex.ReflexReader(stretches=(1.0, 5.0))
