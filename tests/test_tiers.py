import zipfile
from pathlib import Path

import pytest
from PIL import Image

from optictx import Budget, Memory, Tier
from optictx.renderers import RenderConfig
from optictx.schedule import AgeLadder
from optictx.tiers import IMAGE_TIERS, gundam_views, tier_image


def test_each_tier_costs_what_deepseek_ocr_says_its_mode_costs():
    """The oracle is the paper's table (DeepSeek-OCR, Table 1): Tiny 512 px 64 vision tokens,
    Small 640 px 100, Base 1024 px 256, Large 1280 px 400; a page drawn at each tier is that
    size, and sharper tiers cost more."""
    from optictx.cost import COST_MODELS

    cost = COST_MODELS["deepseek-ocr"]
    paper = {Tier.TINY: (512, 64), Tier.SMALL: (640, 100), Tier.BASE: (1024, 256), Tier.LARGE: (1280, 400)}
    for tier, (side, tokens) in paper.items():
        assert tier.side == side and cost.paper_tokens(tier, cost.tier_size(tier, 1280)) == tokens
    costs = [cost.paper_tokens(t, cost.tier_size(t, 1280)) for t in IMAGE_TIERS]
    assert costs == sorted(costs, reverse=True) and Tier.TEXT.side is None and not Tier.GONE.is_image


def test_tier_images_are_derived_from_the_master_and_cached():
    mem = Memory(keep_recent=0)
    mem.add({"role": "user", "content": "hello " * 400})
    page = mem.pages[0]
    for tier in IMAGE_TIERS:
        assert mem.images.at(page, tier).size == (tier.side, tier.side)
    mem.images.at(page, Tier.SMALL)
    assert mem.images.renders == 1  # one master draw served every tier
    with pytest.raises(ValueError, match="no image"):
        tier_image(mem.images.master(page), Tier.TEXT)


CODE = "\n".join(f"    def handler_{i:03d}(self, request):  # route {i}\n        return self.reply(request, {i})"
                 for i in range(160))


@pytest.mark.parametrize("vision", ["openai:gpt-4o", "openai:gpt-4.1", "openai:gpt-5"])
def test_a_tile_priced_model_gets_tall_pages_of_two_tiles_with_wide_columns(vision):
    """OpenAI prices an image by 512-px tiles after fitting it in 2048 px and scaling its short
    side to 768, plus one base charge (its vision guide): a 512 x 1024 page is two tiles, 85 +
    2 x 170 = 425 tokens, where two 512-px pages cost 2 x (85 + 170) = 510 for the same pixels.
    Its pages come that shape at TINY, and a 50-character line of code is drawn whole on one line
    (a square page's 22-character columns cut it)."""
    mem = Memory(keep_recent=2, budget=40_000, vision=vision)
    for i in range(12):
        mem.add({"role": "user", "content": f"read routes part {i}"})
        mem.add({"role": "assistant", "content": CODE.replace("route ", f"route {i}.")})
    ctx = mem.context()
    pages = [p for p in ctx.pages if p.tier.is_image]
    assert pages and {p.image_at(p.tier).size for p in pages} == {(512, 1024)}
    assert {ctx.vision.image_tokens(p.tier, (512, 1024)) for p in pages} == {425}
    from optictx.report import contact_sheet

    sheet = contact_sheet(ctx, thumb=200)  # each page's thumbnail keeps its shape: 100 x 200, centred
    assert sheet.getpixel((8 + 20, 8 + 22 + 100)) == (250, 250, 250) != sheet.getpixel((8 + 50, 8 + 22 + 1))
    line = "    def handler_017(self, request):  # route 3.17"
    assert len(line) > 2 * 22
    assert any(line == drawn.text for p in pages for drawn in p.page.lines)
    square = Memory(keep_recent=2, budget=40_000, vision=vision, render=RenderConfig())
    for t in mem.transcript():
        square.add(t)
    lines = [drawn.text for p in square.pages for drawn in p.lines]
    assert line not in lines and "    def handler_017(self," in lines  # wrapped between tokens there
    # A square page's settings hash as they did before pages could be tall (recorded then), so
    # pages stored under them are not drawn again.
    assert RenderConfig().digest == "ef2139772b2eae7e" and RenderConfig(height=1280).digest != RenderConfig().digest


def test_claude_never_gets_a_page_larger_than_it_looks_at():
    """Anthropic scales an image down to at most 1568 px on its long edge and about 1.15
    megapixels (1092 x 1092) before Claude sees it, and refuses a request of more than 20 images
    with one above 2000 x 2000 ("Images and vision"). Its pages are drawn 2730 px, so every tier
    above TINY (1092) would be scaled down to TINY's size: they go at TINY, at the same price,
    even where the ladder asks for sharper (no provider cache to keep the tiers flat)."""
    mem = Memory(keep_recent=2, budget=40_000, vision="anthropic", cache=False)
    for i in range(12):
        mem.add({"role": "user", "content": f"read routes part {i}"})
        mem.add({"role": "assistant", "content": CODE.replace("route ", f"route {i}.") * 4})
    ctx = mem.context()
    sizes = [p.image_at(p.tier).size for p in ctx.pages if p.tier.is_image]
    assert len(sizes) >= 3 and all(w * h <= 1092 * 1092 and max(w, h) <= 1568 for w, h in sizes), sizes
    plain = Memory(keep_recent=2, budget=40_000, vision="deepseek-ocr", cache=False, render=mem.render)
    for t in mem.transcript():
        plain.add(t)
    assert Tier.LARGE in {p.tier for p in plain.context().pages}  # a consumer that reads them gets them
    gundam = Memory(keep_recent=2, budget=40_000, vision="deepseek-ocr", cache=False, render=mem.render,
                    ladder=AgeLadder(steps=((1, Tier.GUNDAM),)))
    for t in mem.transcript():
        gundam.add(t)
    assert Tier.GUNDAM in {p.tier for p in gundam.context().pages}  # tiles of the same pixels: another view


def test_gundam_views_are_2x2_tiles_plus_global():
    tiles, glob, grid = gundam_views(Image.new("L", (1280, 1280), 255))
    assert len(tiles) == 4 and all(t.size == (640, 640) for t in tiles)
    assert glob.size == (1024, 1024) and grid == (2, 2)


def test_wheel_carries_fonts_and_subpackages(tmp_path):
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
                    "-w", str(tmp_path), str(root)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("optictx-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in ("optictx/py.typed", "optictx/renderers/fonts/DejaVuSans.ttf", "optictx/renderers/draw.py",
                   "optictx/renderers/fonts/LICENSE-DejaVu.txt", "optictx/models/__init__.py"):
        assert needed in names
    assert not any(n.startswith(("renderers/", "models/")) for n in names)  # no generic top-level packages
    # Every package of the source tree ships (a new one left off pyproject's list would not).
    inits = [init.relative_to(root) for init in root.glob("optictx/**/__init__.py")]
    assert inits and all(str(init) in names for init in inits)


def test_render_settings_change_the_pixels_and_round_trip_through_json(tmp_path):
    from optictx.renderers import RenderConfig

    def small(**settings):
        mem = Memory(keep_recent=0, render=RenderConfig(**settings))
        mem.add({"role": "user", "content": "The quick brown fox jumps over the lazy dog. " * 40})
        return mem.images.at(mem.pages[0], Tier.SMALL)

    def ink(img):
        return img.width * img.height * 255 - sum(h * v for v, h in enumerate(img.histogram()))

    plain = small()
    assert ink(small(stroke=1)) > 1.3 * ink(plain)  # bolder glyphs
    assert ink(small(gamma=2.0)) > ink(plain)  # darker edges
    assert small(downscale="lanczos").tobytes() != plain.tobytes()
    assert small(body_font="mono").tobytes() != plain.tobytes()

    tuned = RenderConfig(font_size=19, line_spacing=1.1, tokens_per_page=1100, gamma=1.5)
    tuned.save(tmp_path / "render.json")
    mem = Memory(render=tmp_path / "render.json")
    assert mem.render == tuned and mem.tokens_per_page == 1100
    assert Memory(render=tuned, tokens_per_page=900).tokens_per_page == 900  # the argument wins
    (tmp_path / "bad.json").write_text('{"font_size": "huge"}')
    with pytest.raises(ValueError, match="bad.json: not a RenderConfig"):
        Memory(render=tmp_path / "bad.json")


def test_pages_that_outgrow_the_pixel_cache_are_not_drawn_again_for_the_next_request(sample):
    # The proxy's case: a conversation with more pages than its cache holds pixels for, exported
    # at every request. The PNGs are kept apart from the pixels, so a repeat draws nothing.
    mem = Memory(budget=Budget(tokens=8000), keep_recent=2, image_cache_bytes=32 * 2**20)  # the proxy's
    for m in sample:
        mem.add(m)
    ctx = mem.context()
    imaged = [p for p in ctx.pages if p.tier.is_image]
    master = mem.layout.config.size**2  # bytes of one page's grayscale master
    assert len(imaged) * master > 32 * 2**20  # the masters alone are more than the whole cache
    ctx.to_openai()
    drawn = mem.images.renders
    mem.context().to_openai()
    assert mem.images.renders == drawn
