import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from optictx.renderers import Block, Layout, RenderConfig, draw_page
from optictx.renderers.draw import MARK_GREY
from optictx.renderers.fonts import REPLACEMENT

LAYOUT = Layout(RenderConfig())


def _render(blocks):
    lines = [ln for b in blocks for ln in LAYOUT.lines(b)]
    return lines, *draw_page(lines[:40], LAYOUT)


_PAGE_IN_A_FRESH_PROCESS = """
import hashlib
from optictx.renderers import Block, Layout, RenderConfig, draw_page
layout = Layout(RenderConfig())
blocks = [Block("#1 USER", "header"), Block("Hello, world. " * 30), Block("def f():\\n\\treturn 1", "code")]
lines = [ln for b in blocks for ln in layout.lines(b)]
print(hashlib.sha256(draw_page(lines[:40], layout)[0].tobytes()).hexdigest())
"""


def test_rendering_is_deterministic_across_processes():
    """The same page, pixel for pixel, from two fresh interpreters with different hash seeds
    (set and dict orders, font caches) and from this one. Not against a committed hash: Pillow is
    not pinned, and another FreeType build may anti-alias differently."""
    import os
    import subprocess
    import sys

    runs = {subprocess.run([sys.executable, "-c", _PAGE_IN_A_FRESH_PROCESS], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip() for seed in ("1", "2")}
    blocks = [Block("#1 USER", "header"), Block("Hello, world. " * 30), Block("def f():\n\treturn 1", "code")]
    here = hashlib.sha256(_render(blocks)[1].tobytes()).hexdigest()
    assert runs == {here}


def test_master_is_square_and_boxes_follow_lines():
    lines, img, boxes = _render([Block("#1 USER", "header"), Block("some words " * 50)])
    assert img.size == (1280, 1280)
    assert [b.text for b in boxes] == [ln.text for ln in lines[:40]]
    ys = [b.box[1] for b in boxes]
    assert ys == sorted(ys) and all(b.box[3] <= 1280 for b in boxes)
    # The header band is drawn: its box is darker than the page background on average.
    x0, y0, x1, y1 = boxes[0].box
    assert img.crop((x0, y0, x1, y1)).resize((1, 1), 2).getpixel((0, 0)) < 240


def test_every_drawn_pixel_lies_in_its_lines_box():
    # Underscores and descenders hang below the line pitch: a reader cropping at the box must
    # still see them (a box that ended at the pitch lost every underscore of a code page).
    blocks = [Block("#1 TOOL", "header"), Block("snake_case_name = jumpy(\"___\")  # gjpqy|_", "code"),
              Block("Just a quip: jolly, gaunt and _underlined_ words. " * 3), Block("____ ==== ---- " * 8, "code")]
    for cfg in (RenderConfig(), RenderConfig(columns=3, stroke=1, font_size=15)):
        layout = Layout(cfg)
        lines = [ln for b in blocks for ln in layout.lines(b)]
        img, boxes = draw_page(lines, layout)
        # The header band (grey 216) and a continuation's mark in the gutter (MARK_GREY) are not ink.
        ink = img.point(lambda v: 255 if v < MARK_GREY else 0)
        for box in (b.box for b in boxes):
            ink.paste(0, box)
        assert ink.getbbox() is None, cfg
        bottoms = [b.box[3] - b.box[1] for b in boxes if b.style == "code"]
        assert min(bottoms) > cfg.line_height  # the boxes reach below the pitch, where "_" is drawn


def test_long_words_and_urls_wrap_within_the_width():
    url = "https://example.com/" + "a1b2c3" * 60
    lines = LAYOUT.lines(Block(f"see {url} now"))
    width = LAYOUT.config.text_width
    measure = LAYOUT._m["text"].width
    assert len(lines) > 2
    assert all(measure(ln.text) <= width for ln in lines)
    assert "".join(ln.text for ln in lines).replace(" ", "") == f"see{url}now"


def test_code_keeps_whitespace_and_expands_tabs():
    layout = Layout(RenderConfig(compact_indent=False))
    lines = layout.lines(Block("if x:\n\tpass\n    two  spaces", "code"))
    assert [ln.text for ln in lines] == ["if x:", "    pass", "    two  spaces"]
    # By default four-space indentation is drawn at half its depth, on every line alike.
    assert [ln.text for ln in LAYOUT.lines(Block("if x:\n\tpass\n        two  spaces", "code"))] == [
        "if x:", "  pass", "    two  spaces"]


def test_controls_surrogates_and_unknown_glyphs_become_visible_symbols():
    text = "a\x00b\x1bc\ud800d\u202eE\U000e0001"
    (line,) = LAYOUT.lines(Block(text))
    assert "\ud800" not in line.text and "\u202e" not in line.text
    assert line.text.startswith("a\\x00b\\x1bc" + REPLACEMENT + "dE")


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300), st.sampled_from(["text", "code", "header"]))
def test_any_unicode_lays_out_and_draws(text, style):
    lines = LAYOUT.lines(Block(text, style))
    img, boxes = draw_page(lines[:40], LAYOUT)
    assert len(boxes) == min(40, len(lines))
    for ln in lines:
        ln.text.encode("utf-8")  # what is drawn is always valid text


def test_rtl_and_cjk_are_drawn_by_faces_that_have_them():
    """Every letter of Hebrew, Arabic and Japanese text has a face in the chain (Japanese only
    where a CJK face is installed; else each is U+FFFD, as docs/limits.md says), and each script
    draws ink of its own: no two of them the same pixels."""
    drawn = []
    cjk = "漢字かな交じり文"
    if LAYOUT.fonts.body.face_index(cjk[0]) < 0:  # no CJK face on this machine (docs/limits.md): U+FFFD
        assert [ln.text for ln in LAYOUT.lines(Block(cjk))] == [REPLACEMENT * len(cjk)]
        cjk = "Ελληνικά"  # Greek stands in as the third script
    for text in ("שלום עולם", "مرحبا بالعالم", cjk):
        assert all(LAYOUT.fonts.body.face_index(ch) >= 0 for ch in text if not ch.isspace()), text
        lines = LAYOUT.lines(Block(text))
        img, boxes = draw_page(lines, LAYOUT)
        x0, y0, x1, y1 = boxes[0].box
        ink = img.crop((x0, y0, x1, y1)).point(lambda v: 255 if v < 128 else 0).getbbox()
        assert ink is not None and ink[2] - ink[0] > 40, text  # the line has dark pixels, a word's width
        drawn.append(img.tobytes())
    assert len(set(drawn)) == 3


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=120))
def test_monospace_width_shortcut_matches_freetype(text):
    m = LAYOUT._m["code"]
    assert abs(m.width(text) - m.chain.faces[0].font.getlength(text)) < 0.5


def test_a_copied_config_has_its_own_digest():
    base = RenderConfig()
    assert base.digest  # computed before the copy: a cached value must not travel with it
    copy = base.model_copy(update={"font_size": 12})
    assert copy.digest == RenderConfig(font_size=12).digest != base.digest


def test_whitespace_without_meaning_takes_no_page_room():
    layout = Layout(RenderConfig(compact_indent=False))
    cfg = layout.config
    text = "\n\nfirst   \r\nprogress 10%\rprogress 90%\n\n\n\n    indented\t\n \n\n"
    for style in ("code", "text"):
        lines = layout.lines(Block(text, style))
        # Line ends of every kind break lines, trailing blanks go, a run of blank lines is one,
        # blank lines at either end go; indentation stays.
        assert [ln.text for ln in lines] == ["first", "progress 10%", "progress 90%", "", "    indented"], style
        assert [ln.height for ln in lines] == [cfg.line_height] * 3 + [cfg.line_height // 2, cfg.line_height]
    assert [ln.text for ln in LAYOUT.lines(Block("\n \n", "code"))] == [""]  # an empty message still shows
    assert LAYOUT.lines(Block("a\x0cb\x1c", "code"))[0].text == "a\\x0cb\\x1c"  # controls stay visible


def _pillow_page(lines, layout):
    """The page as Pillow's own `draw.text` draws it, line by line: what the glyph path must equal."""
    from PIL import Image, ImageDraw

    from optictx.renderers.draw import _hook, _places

    cfg = layout.config
    img = Image.new("L", (cfg.size, cfg.size), 255)
    draw = ImageDraw.Draw(img)
    for line, (x, y) in zip(lines, _places(lines, cfg)):
        if line.style == "header":
            draw.rectangle((x - 6, y + 2, x + cfg.text_width + 6, y + line.height - 2), fill=cfg.header_fill)
        if line.style == "wrap":  # a continuation's mark (not text: the subject here is the glyphs)
            _hook(draw, x, y, line, layout)
        if line.style == "rule":
            draw.rectangle((x, y + line.height // 2 - 1, x + cfg.text_width, y + line.height // 2), fill=96)
        elif line.text:
            draw.text((x, y + layout.text_top(line.style)), line.text, font=layout.chain(line.style).faces[0].font,
                      fill=0)
    return img


def test_glyph_masks_draw_the_same_pixels_as_pillow_on_every_corpus():
    from optictx.eval.fidelity import corpora
    from optictx.packer import Packer
    from optictx.tokens import get_tokenizer

    for cfg in (RenderConfig(), RenderConfig(columns=3, font_size=15, body_font="mono")):
        layout = Layout(cfg)
        for name, turns in corpora().items():
            packer = Packer(layout, get_tokenizer(), 1000)
            for turn in turns[:60]:
                packer.add(turn)
            assert len(packer.sealed) >= 8, (name, len(packer.sealed))  # the loop below runs on real pages
            for page in packer.sealed[:8]:
                assert all(ln.text.isascii() for ln in page.lines)
                ours, _ = draw_page(page.lines, layout)
                assert ours.tobytes() == _pillow_page(page.lines, layout).tobytes(), (name, page.index)


_ASCII = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=70)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(_ASCII, st.sampled_from(["text", "code", "header"])), min_size=1, max_size=12),
       st.sampled_from([21, 13]))
def test_glyph_masks_match_pillow_on_any_ascii(rows, size):
    # Kerned pairs ("AV", "Ta"), overlapping glyphs ("ff", "fj"), runs of spaces and words cut
    # anywhere: the pen positions, rounding and blending must all be Pillow's.
    layout = _LAYOUTS.setdefault(size, Layout(RenderConfig(font_size=size)))
    lines = [ln for text, style in rows for ln in layout.lines(Block(f"AVAWAY To ffj {text} Ta.ff", style))][:40]
    ours, _ = draw_page(lines, layout)
    assert ours.tobytes() == _pillow_page(lines, layout).tobytes()


_LAYOUTS: dict[int, Layout] = {}


def test_the_word_cache_stays_within_its_bytes():
    from optictx.renderers.atlas import GlyphInk

    layout = Layout(RenderConfig())
    layout.ink = GlyphInk(max_bytes=20_000)
    lines = layout.lines(Block(" ".join(f"w{i:05d}" for i in range(3000))))[:80]
    ours, _ = draw_page(lines, layout)
    assert layout.ink.bytes <= 20_000 and ours.tobytes() == _pillow_page(lines, layout).tobytes()


def test_a_line_of_rule_characters_is_drawn_as_a_rule():
    from optictx.renderers import RULE

    cfg = LAYOUT.config
    text = "Results\n" + "=" * 60 + "\n  --------  \n# ----------\n---\n" + "\u2500" * 30 + "\nend"
    lines = LAYOUT.lines(Block(text, "code"))
    # Only a whole line of 8 or more of one rule character is decoration; a comment or a short
    # run is text.
    assert [ln.text for ln in lines] == ["Results", RULE, RULE, "# ----------", "---", RULE, "end"]
    assert [ln.style for ln in lines if ln.text == RULE] == ["rule"] * 3
    assert all(ln.height == cfg.line_height // 2 for ln in lines if ln.style == "rule")
    img, boxes = draw_page(lines, LAYOUT)
    x0, y0, x1, y1 = boxes[1].box
    band = img.crop((x0, y0, x1, y1))
    assert band.getextrema()[0] < 128 and band.resize((1, 1), 2).getpixel((0, 0)) > 200  # a thin line
    assert img.crop(boxes[0].box).getextrema()[0] < 64  # text is drawn as text


_DRAWN = st.characters(min_codepoint=0x20, max_codepoint=0x24F, exclude_categories=("Cc", "Cf"))  # drawn as is
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(_DRAWN, max_size=40),
    lambda kids: st.lists(kids, max_size=6) | st.dictionaries(st.text(_DRAWN, max_size=12), kids, max_size=6),
    max_leaves=30)


def _pairs(text):
    import json

    return json.loads(text, object_pairs_hook=list)  # keeps key order and duplicate keys


@settings(max_examples=60, deadline=None)
@given(_JSON, st.sampled_from([1, 2, 4]))
def test_pretty_json_is_drawn_compact_and_keeps_every_token(value, indent):
    import json

    source = json.dumps(value, indent=indent, ensure_ascii=False)
    lines = LAYOUT.lines(Block(source, "code"))
    drawn = "".join(ln.text for ln in lines)
    if "\n" in source:  # a multi-line document: joined, its lines are the same JSON, written compactly
        assert _pairs(drawn) == _pairs(source)
        pretty = Layout(LAYOUT.config.model_copy(update={"compact_json": False})).lines(Block(source, "code"))
        assert len(lines) <= len(pretty)  # never more lines than the document as it came
    m = LAYOUT._m["code"]
    assert all(m.width(ln.text) <= LAYOUT.config.text_width for ln in lines)


def test_compact_json_breaks_between_items_and_leaves_other_code_alone():
    text = '{\n  "id": "cus_5f301850c5",\n  "qty": 10,\n  "dup": 1,\n  "dup": 2.50,\n  "big": 1e5\n}'
    three = Layout(RenderConfig(columns=3))  # a column 31 characters wide
    lines = [ln.text for ln in three.lines(Block(text, "code"))]
    assert lines == ['{"id": "cus_5f301850c5",', '"qty": 10, "dup": 1, "dup":', '2.50, "big": 1e5}']
    # Numbers keep their spelling and duplicate keys stay: only whitespace changed.
    pretty = Layout(RenderConfig(columns=3, compact_json=False)).lines(Block(text, "code"))
    assert [ln.text for ln in pretty][1] == '  "id": "cus_5f301850c5",'
    # Not JSON, one line of JSON, and JSON nested past the parser's depth are drawn as they are.
    plain = Layout(RenderConfig(compact_json=False))
    for other in ('{\n  "a": 1,\n}', '{"a":  1}', "[" * 100_000 + "\n" + "]" * 100_000, "def f():\n    return {}"):
        assert LAYOUT.lines(Block(other, "code")) == plain.lines(Block(other, "code"))
