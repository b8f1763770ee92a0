"""The default density is legible: Tesseract reads a full prose page at SMALL (640 px)."""

from conftest import needs_tesseract

from optictx import Memory, Tier
from optictx.readers import char_accuracy
from optictx.sample import prose_corpus


@needs_tesseract
def test_default_density_reads_at_98_percent_on_small():
    from optictx.readers import TesseractReader

    mem = Memory(keep_recent=0)
    for chunk in prose_corpus()[:4]:
        mem.add({"role": "user", "content": chunk})
    page = mem.pages[1]  # a full page from the middle of the corpus
    assert mem.tokenizer.count(page.text) >= 800  # a full page (its header lines take some room)
    got = TesseractReader().read(mem.images.at(page, Tier.SMALL))
    assert char_accuracy(page.text, got) >= 0.98


def test_char_accuracy_folds_layout_and_typography():
    assert char_accuracy("a  b\n“c”", 'a b "c"') == 1.0
    assert char_accuracy("abcd", "abce") == 0.75
