"""Bad input gets a clear error or a safe rendering: never a crash, hang or over-budget context."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optictx import Budget, Memory

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
    mem = Memory(keep_recent=1)
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    mem.add({"role": "user", "content": [{"type": "text", "text": "look"}, part]})
    mem.add({"role": "assistant", "content": "ok"})
    mem.add({"role": "user", "content": [part]})
    ctx = mem.context()
    assert "[image]" in ctx.pages[0].text
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
    assert any("orphan" in p.text for p in ctx.pages)


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
