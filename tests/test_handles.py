"""Page handles (issue 45): a page's short id is the same for its whole life, differs between
memories, is stated beside its image, and is read back from the image at its smallest tier."""

from __future__ import annotations

import re

import pytest
from conftest import conversations, needs_tesseract
from hypothesis import HealthCheck, given, settings

from optictx import Memory, Tier
from optictx.handles import ALPHABET, LENGTH
from optictx.sample import sample_conversation

HANDLE = re.compile(f"^([{ALPHABET}]{{{LENGTH}}})$", re.M)


def _filled(turns: int = 90, **kw) -> Memory:
    mem = Memory(keep_recent=2, **kw)
    with mem.batch():
        for t in sample_conversation()[:turns]:
            mem.add(t)
    return mem


def _handles(mem: Memory) -> dict[int, str]:
    return {p.index: p.handle for p in mem.pages if p.sealed}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=conversations(max_events=40), more=conversations(max_events=20))
def test_a_page_keeps_its_handle_through_more_turns_compaction_and_a_reopen(tmp_path_factory, first, more):
    path = tmp_path_factory.mktemp("h") / "m.db"
    mem = Memory(store=path, budget=1500, keep_recent=1)
    for t in first:
        mem.add(t)
    before = _handles(mem)
    mem.context()  # a compaction where the budget asks for one
    for t in more:
        mem.add(t)
    mem.context(budget=600)
    after = _handles(mem)
    assert {i: after[i] for i in before} == before  # sealed pages never change their handle
    mem.close()
    again = Memory.open(path)
    assert _handles(again) == after
    assert all(p.handle and p.lines[0].style == "handle" for p in again.pages)
    again.close()


def test_two_memories_never_share_a_handle():
    a, b = _filled(), _filled()  # the same turns, two keys
    ha, hb = set(_handles(a).values()), set(_handles(b).values())
    assert len(ha) == len(_handles(a)) > 3 and not ha & hb


@pytest.mark.parametrize("key", [b"\0" * 32, "ab" * 8, "G" * 32, 7])
def test_a_key_that_is_not_one_is_refused_by_name_with_or_without_a_store(tmp_path, key):
    from optictx.errors import ConfigError

    for store in (None, tmp_path / "m.db"):
        with pytest.raises(ConfigError, match="key="):
            Memory(key=key, store=store)
    assert _handles(_filled(key="0f" * 16)) == _handles(_filled(key="0f" * 16))  # a key given names the pages


def test_each_image_page_goes_after_its_label_in_every_export():
    mem = _filled(budget=4000)
    ctx = mem.context()
    images = [p for p in ctx.pages if p.tier.is_image]
    labels = [s.text for s in ctx.segments if getattr(s, "kind", None) == "label"]
    assert labels == [f"[page {p.page.handle}: turns #{p.turn_ids[0]}-#{p.turn_ids[-1]}]" for p in images]
    for body in (ctx.to_openai(), ctx.to_anthropic()[1]):
        text = str(body)
        assert all(label in text for label in labels)
        assert text.index(labels[-1]) < text.rindex("image")  # the label first, then its image


@needs_tesseract
@pytest.mark.parametrize("vision,budget,turns", [("deepseek-ocr", 4000, 90), ("openai:gpt-4o", 4000, 90),
                                                 ("anthropic", 60_000, 433)])  # Claude's 2730 px pages
def test_a_handle_reads_back_at_tiny_by_both_readers(vision, budget, turns):
    from optictx.models import ReflexReader
    from optictx.readers import TesseractReader

    # One key, so one set of handles every run: the rate over random ones is benchmarks/recall.py's
    # (Tesseract misreads about one handle in seventy at TINY: f as t, p as e).
    mem = _filled(turns, vision=vision, budget=budget, key="5eed" * 8)
    pages = [p for p in mem.pages if p.sealed][:8]
    assert len(pages) >= 3
    for reader in (TesseractReader(), ReflexReader()):
        read = mem.images.read(reader, pages, Tier.TINY)
        got = [HANDLE.search(text.replace(" ", "")) for text in read]  # the page's first line
        assert [m.group(1) if m else None for m in got] == [p.handle for p in pages], type(reader).__name__
