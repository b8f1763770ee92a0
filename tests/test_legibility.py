"""The default density is legible: Tesseract reads a full prose page at SMALL (640 px)."""

import pytest
from conftest import needs, needs_tesseract

from optictx import Memory, Tier
from optictx.readers import char_accuracy
from optictx.sample import prose_corpus


@needs_tesseract
def test_default_density_reads_at_98_percent_on_small():
    from optictx.readers import TesseractReader

    mem = Memory(keep_recent=0)
    for chunk in prose_corpus()[:8]:
        mem.add({"role": "user", "content": chunk})
    page = max((p for p in mem.pages if p.sealed), key=lambda p: mem.tokenizer.count(p.text))
    assert mem.tokenizer.count(page.text) >= 800  # a full page (its header lines take some room)
    got = TesseractReader().read(mem.images.at(page, Tier.SMALL), mem.images.boxes(page, Tier.SMALL))
    assert char_accuracy(page.text, got) >= 0.98


@needs_tesseract
def test_tesseract_reads_a_larger_page_at_the_size_it_reads_a_1280_px_one():
    """Claude's pages are drawn 2730 px with the same glyphs: at each tier their lines are as tall
    as a 1280-px page's, so Tesseract enlarges them as much (1920 / 512 at TINY), not to the same
    width, which would read Claude's lines at half the size."""
    from optictx.cost import PIXEL_PRICED
    from optictx.readers import TesseractReader

    reader, scaled = TesseractReader(), []
    for render in (None, PIXEL_PRICED):
        mem = Memory(keep_recent=0, render=render)
        for chunk in prose_corpus()[:3]:
            mem.add({"role": "user", "content": chunk})
        page = mem.pages[0]
        image, boxes = mem.images.at(page, Tier.TINY), mem.images.boxes(page, Tier.TINY)
        heights = sorted(b[3] - b[1] for b in boxes)
        scaled.append(reader.scale(image, boxes) * heights[len(heights) // 2])
    assert scaled[0] == pytest.approx(10 * 1920 / 512) and scaled[1] == pytest.approx(scaled[0])


@needs("rapidfuzz", "eval")
def test_char_accuracy_folds_layout_and_typography():
    assert char_accuracy("a  b\n“c”", 'a b "c"') == 1.0
    assert char_accuracy("abcd", "abce") == 0.75


def _crops():
    mem = Memory(keep_recent=0)
    mem.add({"role": "user", "content": "Invoice 4417 was paid on 2026-03-01 by customer cus_5f30. " * 20})
    master = mem.images.master(mem.pages[0])
    return [master.crop((0, 0, 1280, 200)), master.crop((0, 200, 1280, 400))]


@needs_tesseract
def test_batch_reads_equal_sequential_reads_and_are_cached():
    from optictx.readers import TesseractReader

    crops = _crops()
    reader = TesseractReader(workers=2)
    batch = reader.read_batch(crops)
    assert batch == [TesseractReader(workers=1).read(c) for c in crops]
    assert "4417" in batch[0]
    assert reader.read(crops[0]) is batch[0]  # served from the digest cache


@needs_tesseract
def test_missing_language_model_is_a_clear_error(tmp_path, monkeypatch):
    from optictx.readers import ReaderError, TesseractReader

    monkeypatch.setenv("TESSDATA_PREFIX", str(tmp_path))
    with pytest.raises(ReaderError, match="apt-get install tesseract-ocr"):
        TesseractReader(lang="xx")


def _prose_page():
    """The first page of the prose corpus, its SMALL image and line boxes, and its memory."""
    mem = Memory(keep_recent=0)
    for chunk in prose_corpus()[:2]:
        mem.add({"role": "user", "content": chunk})
    page = mem.pages[0]
    return mem, page, mem.images.at(page, Tier.SMALL), mem.images.boxes(page, Tier.SMALL)


@needs_tesseract
def test_line_box_reading_reads_each_drawn_line():
    from optictx.readers import TesseractReader

    _, page, image, boxes = _prose_page()
    assert len(boxes) == len(page.lines) and abs(boxes[0][0] - 24 * 640 / 1280) <= 1  # at the margin, in SMALL px
    got = TesseractReader(line_boxes=True, workers=1).read(image, boxes)
    assert len(got.split("\n")) == len(page.lines)  # one result per line: blank lines stay blank
    assert char_accuracy(page.text, got) >= 0.98
    page_mode = TesseractReader(workers=1)  # whole columns, one after the other
    assert char_accuracy(page.text, page_mode.read(image, boxes)) >= 0.98
    assert char_accuracy(page.text, page_mode.read(image)) < 0.9  # without boxes it reads across columns


@needs("rapidocr", "eval")
def test_the_neural_reader_reads_each_line_of_a_page_and_finds_lines_itself():
    from optictx.readers import RapidOcrReader

    mem, page, image, boxes = _prose_page()
    reader = RapidOcrReader()
    got = reader.read(image, boxes)
    assert len(got.split("\n")) == len(page.lines)  # one result per drawn line, blank ones blank
    assert char_accuracy(page.text, got) >= 0.97
    assert reader.read(image, boxes) is got  # served from the digest cache
    crop = mem.images.master(page).crop((0, 0, 1280, 160))  # no boxes: it finds the lines itself
    assert page.lines[1].text in reader.read(crop).split("\n")


@needs_tesseract
@pytest.mark.parametrize("geometry", [{}, {"vision": "anthropic", "budget": 200_000}], ids=["default", "claude"])
def test_a_tool_call_s_id_is_read_back_on_a_tiny_page(geometry):
    """A call and its result are paired on the pages by four digits taken from the call's id, in
    brackets, the call's before its name (after the arguments a wrap could part the bracket from
    them). Both readers read nearly all forty tags on a TINY page, the results' in a header's bold
    type (39 or 40 here). The id's own last four characters, random letters and digits, were the
    hardest text a page held: on the default page Tesseract read 18 and the reflex reader 26; with
    the ellipsis that once led them (`[…kiZ1]`) neither read one."""
    import random
    import re
    import string

    from optictx.blocks import short_id
    from optictx.models import ReflexReader
    from optictx.readers import TesseractReader

    rng = random.Random(3)
    ids = ["toolu_01" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(22)) for _ in range(20)]
    mem = Memory(keep_recent=0, **geometry)
    for n, call_id in enumerate(ids):
        mem.add({"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function", "function": {
            "name": "Bash", "arguments": f'{{"command": "ls src/part_{n}"}}'}}]})
        mem.add({"role": "tool", "tool_call_id": call_id, "content": f"module_{n}.py"})
    page = mem.pages[0]
    tags = {short_id(i) for i in ids}
    drawn = [tag for line in page.lines for tag in re.findall(r"\[(\d{4})\]", line.text) if tag in tags]
    assert len(drawn) == 40  # each id twice: its call and its result
    image, boxes = mem.images.at(page, Tier.TINY), mem.images.boxes(page, Tier.TINY)
    for reader in (TesseractReader(line_boxes=True), ReflexReader()):
        read = [tag for tag in re.findall(r"\d{4}", reader.read(image, boxes).replace(" ", "")) if tag in tags]
        assert len(read) >= 36, (type(reader).__name__, len(read))
