import pytest

from optictx import Budget, BudgetError, KVGeometry, Memory
from optictx.tokens import get_tokenizer


def test_kv_presets_match_the_models_own_config():
    """The oracle is transformers' own config of the decoder (12 layers, 10 KV heads of 128),
    with the released weights' bf16: K and V, 2 bytes each, per layer and head dimension."""
    pytest.importorskip("transformers", reason="the models extra: transformers' config is the oracle")
    from transformers.models.unlimited_ocr.configuration_unlimited_ocr import UnlimitedOcrTextConfig

    t = UnlimitedOcrTextConfig()
    expected = 2 * t.num_hidden_layers * t.num_key_value_heads * t.head_dim * 2
    for name in ("deepseek-ocr", "unlimited-ocr"):
        assert KVGeometry.preset(name).bytes_per_position == expected == 61_440


def test_kv_from_transformers_like_configs():
    class Text:
        num_hidden_layers, num_attention_heads, num_key_value_heads, hidden_size = 24, 16, 4, 2048
        torch_dtype = "float32"

    class VLM:
        text_config = Text()

    g = KVGeometry.from_config(VLM())
    assert (g.layers, g.kv_heads, g.head_dim, g.dtype_bytes) == (24, 4, 128, 4)
    d = KVGeometry.from_config({"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64, "head_dim": 32})
    assert d.bytes_per_position == 2 * 2 * 4 * 32 * 2
    with pytest.raises(ValueError, match="num_hidden_layers"):
        KVGeometry.from_config({})


def test_kv_budget_with_rswa_window_and_full_attention():
    kv = KVGeometry.preset("deepseek-ocr")
    assert Budget(kv_bytes=61_440 * 1128, kv=kv, decode_window=128).limit == 1000
    assert Budget(kv_bytes=61_440 * 1128, kv=kv, max_new_tokens=1000).limit == 128
    assert Budget(tokens=5000, max_new_tokens=1000).limit == 4000


@pytest.mark.parametrize(("kwargs", "says"), [
    ({}, r"give exactly one of Budget\(tokens=N\) or Budget\(kv_bytes=B, kv=KVGeometry"),
    ({"tokens": 5, "kv_bytes": 5}, r"give exactly one of Budget\(tokens=N\)"),
    ({"kv_bytes": 10**6}, r"needs kv=KVGeometry\(\.\.\.\), e\.g\. KVGeometry\.preset\('deepseek-ocr'\)"),
    ({"tokens": 10, "max_new_tokens": 10}, r"leaves 0 positions for the context; raise it"),
    ({"tokens": 0}, r"tokens\s+Input should be greater than or equal to 1"),
])
def test_invalid_budgets_say_how_to_fix(kwargs, says):
    with pytest.raises(ValueError, match=says):
        Budget(**kwargs)


def test_context_kv_bytes_reports_prefix_plus_window():
    kv = KVGeometry.preset("deepseek-ocr")
    mem = Memory(budget=Budget(kv_bytes=61_440 * 3000, kv=kv, decode_window=128))
    for i in range(40):
        mem.add({"role": "user", "content": f"message {i} " + "data " * 200})
    ctx = mem.context()
    assert ctx.tokens <= 3000 - 128
    assert ctx.kv_bytes == (ctx.tokens + 128) * 61_440 <= 61_440 * 3000


def test_budget_error_says_by_how_much():
    mem = Memory(budget=Budget(tokens=10))
    mem.add({"role": "system", "content": "word " * 50})
    with pytest.raises(BudgetError, match="short by") as info:
        mem.context()
    assert info.value.shortfall == get_tokenizer().count("word " * 50) - 10


def test_offline_tokenizer_and_plugged_tokenizer():
    assert get_tokenizer().count("hello world") == 2
    assert get_tokenizer().count("<|endoftext|>") > 1  # special tokens in user text are plain text

    class Chars:
        def encode(self, text):
            return list(text)

    mem = Memory(tokenizer=Chars())
    mem.add({"role": "user", "content": "abcd"})
    assert mem.context().tokens == 4


def test_decode_kv_bytes_rswa_vs_full_attention():
    g = KVGeometry.preset("unlimited-ocr")
    assert g.decode_bytes(1000, 50, window=128) == (1000 + 50) * 61_440  # window not yet full
    assert g.decode_bytes(1000, 5000, window=128) == 1128 * 61_440  # constant after the window
    assert g.decode_bytes(1000, 5000) == 6000 * 61_440
    mem = Memory(vision="unlimited-ocr", budget=Budget(tokens=4000))
    for i in range(60):
        mem.add({"role": "user", "content": f"turn {i} " + "words " * 80})
    ctx = mem.context()
    report = ctx.decode_kv(8192)
    assert report["prefix"] == ctx.tokens and report["window"] == 128
    assert report["rswa_bytes"] == (ctx.tokens + 128) * 61_440
    assert report["rswa_over_full"] == pytest.approx((ctx.tokens + 128) / (ctx.tokens + 8192))
    with pytest.raises(ValueError, match="KVGeometry.from_config"):
        Memory(vision="openai:gpt-4o").context().decode_kv(10)
