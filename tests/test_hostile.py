"""Bad input gets a clear error or a safe rendering: never a crash, hang or over-budget context."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optictx import Budget, Limits, Memory

NASTY = ["", "\x00\x01\x1b[31m", "\ud800\udfff\ud83d", "\u202eevil\u202c", "a\u200b\u200db", "👩‍👩‍👧‍👦🏳️‍🌈",
         "漢字" * 50, "مرحبا", "<|endoftext|><|im_start|>", "\t\tindent\r\nwindows", "x" * 5000 + "\n" * 300]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.text(max_size=200), st.sampled_from(NASTY)), min_size=1, max_size=12),
       st.integers(50, 3000))
def test_arbitrary_unicode_never_crashes_context_or_exporters(texts, budget):
    mem = Memory(budget=Budget(tokens=budget), keep_recent=1, tokens_per_page=200)
    for i, text in enumerate(texts):
        mem.add({"role": "user" if i % 2 else "assistant", "content": text})
    ctx = mem.context()
    assert ctx.tokens <= budget
    for p in ctx.pages:
        if p.tier.is_image:
            assert p.image.size == (p.tier.side, p.tier.side)
    json.dumps(ctx.to_openai())  # serializable
    ctx.to_anthropic()


def test_huge_turn_spans_pages_and_fits():
    mem = Memory(budget=Budget(tokens=4000), keep_recent=0)
    mem.add({"role": "tool", "tool_call_id": "c", "content": "line of tool output 12345\n" * 20000})
    ctx = mem.context()
    assert ctx.tokens <= 4000
    assert len(mem.pages) > 50
    assert mem.transcript()[0].content.count("\n") == 20000  # stored verbatim


def test_images_in_content_parts_are_kept_native_and_shown_as_placeholders_on_pages():
    mem = Memory(keep_recent=1, verbatim=False)
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    mem.add({"role": "user", "content": [{"type": "text", "text": "look"}, part]})
    mem.add({"role": "assistant", "content": "ok"})
    mem.add({"role": "user", "content": [part]})
    ctx = mem.context()
    assert "[image]" in mem.pages[0].text
    assert ctx.to_openai()[-1]["content"] == [part]


def test_tool_call_with_broken_json_renders():
    mem = Memory(keep_recent=0)
    mem.add({"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"a": '}}]})
    mem.add({"role": "tool", "tool_call_id": "c", "content": "err"})
    assert 'f({"a": )' in mem.pages[0].text


def test_orphan_tool_result_goes_to_pages_not_native_text():
    mem = Memory(keep_recent=5, budget=Budget(tokens=100000))
    mem.add({"role": "tool", "tool_call_id": "nobody", "content": "orphan"})
    mem.add({"role": "user", "content": "hi"})
    ctx = mem.context()
    assert all(m["role"] != "tool" for m in ctx.to_openai())
    # On a page: dropped here, as no page costs less than the two turns sent as they came.
    assert any("orphan" in p.text for p in [*(s.page for s in ctx.pages), *ctx.gone])
    assert not ctx.verbatim and ctx.tokens <= sum(mem.tokenizer.count(t.text) for t in mem.transcript())


@pytest.mark.parametrize("bad", [None, 3, ["x"], {"role": "user", "content": {"nested": "dict"}}])
def test_wrong_types_raise(bad):
    with pytest.raises((TypeError, ValueError)):
        Memory().add(bad)


def test_budget_too_small_for_anything_but_pages_keeps_nothing_and_fits():
    mem = Memory(budget=Budget(tokens=1), keep_recent=4)
    for i in range(10):
        mem.add({"role": "user", "content": f"message {i}"})
    ctx = mem.context()
    assert ctx.tokens <= 1 and not ctx.pages and ctx.gone
    assert {tid for p in ctx.gone for tid in p.turn_ids} | {s.turn.id for s in ctx.text_segments} == set(range(10))


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=30),
                     lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
                     max_leaves=12)
_part = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, st.one_of(st.text(max_size=80), st.sampled_from(NASTY))),
    st.builds(lambda kind, extra: {"type": kind, "data": extra}, st.text(min_size=1, max_size=12), _json),
    st.just({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}),
)
_args = st.one_of(st.text(max_size=60), st.just('{"a": '), st.just("{}"), st.just('{"x": "\\ud800"}'))


@st.composite
def _turns(draw):
    """User/assistant turns with text or content parts, assistant tool calls and their results."""
    out = []
    for i in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(["text", "parts", "call"]))
        if kind == "call":
            cid = f"call_{i}"
            name = draw(st.text(min_size=1, max_size=20))
            out.append({"role": "assistant", "content": None,
                        "tool_calls": [{"id": cid, "type": "function",
                                        "function": {"name": name, "arguments": draw(_args)}}]})
            out.append({"role": "tool", "tool_call_id": cid, "content": draw(st.text(max_size=200))})
        elif kind == "parts":
            out.append({"role": "user", "content": draw(st.lists(_part, min_size=1, max_size=4))})
        else:
            out.append({"role": draw(st.sampled_from(["user", "assistant"])),
                        "content": draw(st.one_of(st.text(max_size=300), st.sampled_from(NASTY)))})
    return out


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(_turns(), st.integers(30, 4000), st.sampled_from(["deepseek-ocr", "anthropic", "openai:gpt-4o"]))
def test_content_parts_tool_calls_and_sqlite_round_trip_never_crash(tmp_path_factory, turns, budget, vision):
    path = tmp_path_factory.mktemp("fuzz") / "m.db"
    mem = Memory(store=path, budget=Budget(tokens=budget), keep_recent=2, tokens_per_page=120, vision=vision)
    for t in turns:
        mem.add(t)
    ctx = mem.context()
    assert ctx.tokens <= budget
    json.dumps(ctx.to_openai())
    json.dumps(ctx.to_anthropic(), default=str)
    transcript, digests = mem.transcript(), [p.digest for p in mem.pages]
    mem.close()
    again = Memory.open(path)
    assert again.transcript() == transcript  # verbatim through SQLite, surrogates included
    assert [p.digest for p in again.pages] == digests


@pytest.mark.parametrize("bad", [
    {"type": "data", "v": b"raw bytes"},
    {"type": "data", "v": {1: "non-string key"}},
    {"type": "data", "v": object()},
])
def test_content_parts_that_are_not_json_data_raise_clearly(bad):
    with pytest.raises(TypeError, match="content part 0"):
        Memory().add({"role": "user", "content": [bad]})


def test_deeply_nested_content_parts_and_metadata_raise_clearly():
    deep: dict = {}
    cur = deep
    for _ in range(5000):  # json.dumps would hit RecursionError deep inside the store
        cur["a"] = {}
        cur = cur["a"]
    with pytest.raises(ValueError, match="nested more than 64"):
        Memory().add({"role": "user", "content": [{"type": "data", "v": deep}]})
    with pytest.raises(ValueError, match="metadata is nested"):
        Memory().add({"role": "user", "content": "x", "metadata": deep})


def _bomb_png() -> bytes:
    """A 1-bit 30000x30000 PNG: a few hundred KB that would decode to 900 megapixels."""
    import struct
    import zlib

    w = h = 30000
    raw = zlib.compress((b"\x00" + b"\x00" * (w // 8)) * h, 9)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 1, 0, 0, 0, 0)) + \
        chunk(b"IDAT", raw) + chunk(b"IEND", b"")


def test_decompression_bombs_in_content_parts_are_never_decoded_and_pillow_guard_stays_on():
    import base64

    from PIL import Image

    default_guard = Image.MAX_IMAGE_PIXELS
    bomb = base64.b64encode(_bomb_png()).decode()
    part = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{bomb}"}}
    mem = Memory(keep_recent=1, budget=Budget(tokens=3000), verbatim=False)
    mem.add({"role": "user", "content": [{"type": "text", "text": "what is this?"}, part]})
    mem.add({"role": "assistant", "content": "a picture"})
    mem.add({"role": "user", "content": [part]})
    ctx = mem.context()
    assert "[image]" in mem.pages[0].text  # drawn as a placeholder, not decoded
    assert ctx.to_openai()[-1]["content"] == [part]  # the native turn passes through untouched
    assert ctx.to_anthropic()[1][-1]["content"][-1]["source"]["data"] == bomb
    assert default_guard == Image.MAX_IMAGE_PIXELS and default_guard is not None
    with pytest.raises(Image.DecompressionBombError):  # and the guard would refuse it
        Image.open(__import__("io").BytesIO(_bomb_png())).load()


@pytest.mark.parametrize("kind", ["cjk-word", "lines"])
def test_multi_megabyte_turns_render_and_fit(kind):
    # One 2.4M-character word used to crash FreeType (Pillow refuses strings over 1M characters).
    text = "漢字" * 1_200_000 if kind == "cjk-word" else "line of tool output 12345\n" * 80_000
    mem = Memory(budget=Budget(tokens=8000), keep_recent=0)
    mem.add({"role": "user", "content": text})
    ctx = mem.context()
    assert ctx.tokens <= 8000 and len(mem.pages) > 100 and ctx.pages


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["x", "cjk", "lines"])
def test_10_mb_turns(kind):
    n = 10_000_000
    text = {"x": "x" * n, "cjk": "漢字" * (n // 6), "lines": "line of tool output 12345\n" * (n // 26)}[kind]
    mem = Memory(budget=Budget(tokens=8000), keep_recent=0)
    mem.add({"role": "tool" if kind == "lines" else "user", "tool_call_id": "c" if kind == "lines" else None,
             "content": text})
    ctx = mem.context()
    assert ctx.tokens <= 8000 and ctx.pages
    assert mem.transcript()[0].content == text


def test_pages_per_context_are_capped_by_limits_and_by_the_provider():
    mem = Memory(budget=Budget(tokens=400_000), keep_recent=1, verbatim=False)
    for i in range(150):  # ~170 pages (a line repeated on a page is drawn once, then referred to)
        mem.add({"role": "user", "content": f"turn {i} " + "words and more words " * 400})
    claude = mem.context(vision="anthropic")
    assert len([p for p in claude.pages if p.tier.is_image]) == 100  # Anthropic's per-request cap
    sealed = [p for p in mem.pages if p.sealed]
    assert claude.pages[-1].page.index == len(sealed) - 1  # the newest kept, the oldest dropped
    assert len([p for p in mem.context().pages if p.tier.is_image]) >= len(sealed) > 100  # DeepSeek-OCR: no cap
    capped = Memory(budget=Budget(tokens=400_000), keep_recent=1, limits=Limits(max_images=3), verbatim=False)
    for t in mem.transcript()[:20]:
        capped.add(t.model_copy(update={"id": None}))
    assert len([p for p in capped.context().pages if p.tier.is_image]) == 3
