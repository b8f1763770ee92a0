"""The dashboard in a real headless browser (Debian's chromium, driven by Playwright). On one
person's proxy (the default on loopback without a proxy key) it shows every conversation with no
key, titled by its first user message, with time, model and the bill; its pages open full size
beside the text they replaced; with nothing served yet it says what to do. Per key, a key sees
its own conversations, never another's."""

from __future__ import annotations

import io
import math
import shutil

import numpy as np
import pytest
from conftest import needs
from PIL import Image

pytestmark = [needs("starlette", "serve"), needs("uvicorn", "serve"), needs("playwright", "dev")]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary: apt-get install chromium "
                                                             "(.ci/run installs it)")
# Flags for a closed network: no background fetches, no sandbox as root (tests run as root in CI).
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]
TASK = "Task 1: The monthly report double-counts refunds"  # the sample's first user message starts so


def _served(tenancy: str, requests: tuple[tuple[str, int], ...], model: str = "deepseek-ocr", budget: int = 2500):
    """A proxy that served `requests`: (API key, step), step k sending the sample's first 60 + 10k
    messages."""
    import openai

    from optictx.sample import sample_conversation
    from optictx.serve import ServeConfig

    from serve_peers import Proxy, start_upstream, stop_upstream

    state, server = start_upstream()
    proxy = Proxy(ServeConfig(upstream=state.openai_url, budget=budget, keep_recent=4, tenancy=tenancy))
    sample = sample_conversation()
    try:
        for key, step in requests:
            client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=0)
            client.chat.completions.create(model=model, messages=sample[: 60 + 10 * step])
        yield proxy
    finally:
        proxy.stop()
        stop_upstream(server)


@pytest.fixture()
def per_key():
    yield from _served("per-key", (("key-a", 0), ("key-a", 1), ("key-a", 2), ("key-b", 0)))


@pytest.fixture()
def personal():
    # Two tokens, as a subscription's OAuth token rotates mid-session: still one person's.
    # gpt-4o: a model whose price genai-prices knows, so the bill shows in dollars.
    yield from _served("auto", (("oauth-token-1", 0), ("oauth-token-1", 1), ("oauth-token-2", 2)), "gpt-4o", 8000)


@pytest.fixture()
def empty():
    yield from _served("auto", ())


@pytest.fixture()
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield b
        finally:
            b.close()


def _loaded(page, selector: str) -> None:
    """Waits until the image at `selector` has arrived (a blob: the page's CSP forbids eval)."""
    for _ in range(200):
        if page.locator(selector).evaluate("img => img.complete && img.naturalWidth") > 0:
            return
        page.wait_for_timeout(50)
    raise AssertionError(f"{selector} never loaded")


def _not_blank(shot: bytes) -> None:
    image = Image.open(io.BytesIO(shot)).convert("L")
    low, high = image.getextrema()
    assert high - low > 100, "the screenshot is blank"
    assert len(np.unique(np.asarray(image.resize((64, 64))))) > 20  # text, a plot, pages: not one flat colour


@needs_chromium
def test_one_persons_dashboard_needs_no_key_and_opens_pages_full_size(personal, browser, tmp_path):
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    page.goto(personal.url + "/optictx/")
    page.wait_for_selector("#conversations tbody tr")
    assert page.locator("#keys").is_hidden()  # nothing to paste
    assert page.inner_text("#store") == "Memories kept in nowhere (--store :memory:)."  # said to the one person
    rows = page.locator("#conversations tbody tr")
    assert rows.count() == 1  # a rotating token kept one conversation
    row = rows.first.inner_text()
    assert row.startswith(TASK) and "gpt-4o" in row and "\t3\t" in row  # title, model, requests
    totals = page.inner_text("#totals")
    assert row.count("$") >= 2 and "$" in totals
    assert totals.index("billed by the provider $") < totals.index("Modeled both ways $")  # the provider's first
    # "saved" only between figures priced alike, with the sign they give: the bill against the
    # same requests as they came, and the two modeled figures (the oracle: the ledger's sums).
    [conv] = page.evaluate("fetch('/optictx/api/conversations').then((r) => r.json())")["conversations"]
    billed = 1 - conv["billed_usd"] / conv["came_billed_usd"]
    modeled = 1 - conv["cost_usd"] / conv["passthrough_usd"]
    before, after = totals.split("Modeled both ways")
    for share, where in ((billed, before), (modeled, after)):
        pct = math.floor(1000 * share + 0.5) / 10  # as the page's Math.round rounds
        word = f"{pct:g}% saved" if pct > 0 else f"{-pct:g}% more through optictx" if pct < 0 else "even"
        assert word in where, (word, totals)
    rows.first.click()
    page.wait_for_selector("#requests tbody tr")
    assert page.locator("#requests tbody tr").count() == 3
    legend = page.inner_text("#legend")
    assert all(word in legend for word in ("tiny", "gone", "text", "append", "as it came"))
    page.wait_for_selector("#pages .thumb img")
    thumbs = page.locator("#pages .thumb")
    assert thumbs.count() >= 3
    _loaded(page, "#pages .thumb img >> nth=0")
    label = thumbs.first.inner_text()
    tier = label.split(" \u00b7 ")[1]
    thumbs.first.click()
    page.wait_for_selector("#viewer:not([hidden])")
    _loaded(page, "#full")
    from optictx import Tier

    assert page.locator("#full").evaluate("img => img.naturalWidth") == Tier(tier).side  # as the model got it
    shown = page.locator("#full").evaluate("img => img.clientWidth")  # inside its 1-px border
    assert shown == Tier(tier).side  # drawn at its own size, not shrunk to a thumbnail
    text = page.inner_text("#full-text")
    assert len(text) > 200 and "#" in text  # the turns the page replaced, with their headers
    shot = page.screenshot(full_page=True)
    (tmp_path / "dashboard.png").write_bytes(shot)
    _not_blank(shot)


@needs_chromium
def test_per_key_a_key_sees_its_own_conversations_only(per_key, browser):
    page = browser.new_page(viewport={"width": 1200, "height": 1200})
    page.goto(per_key.url + "/optictx/")
    page.wait_for_selector("#keys:not([hidden])")
    # It says to give the key once the conversations have loaded (a second fetch after the form
    # shows): waiting for it, not asserting at once, which raced that fetch (seen failing once).
    page.wait_for_selector("#empty-key", state="visible", timeout=10_000)
    page.fill("#api-key", "key-a")
    page.click("button[type=submit]")
    page.wait_for_selector("#conversations tbody tr")
    rows = page.locator("#conversations tbody tr")
    assert rows.count() == 1 and "\t3\t" in rows.first.inner_text()  # key-b's conversation is not listed
    assert page.locator("#store").is_hidden()  # where the server keeps memories: not a key's business
    page.fill("#api-key", "key-c")
    page.click("button[type=submit]")
    page.wait_for_selector("#empty:not([hidden])")
    assert page.locator("#conversations tbody tr").count() == 0


@needs_chromium
def test_with_nothing_served_the_dashboard_says_what_to_do(empty, browser):
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.goto(empty.url + "/optictx/")
    page.wait_for_selector("#empty:not([hidden])")
    said = page.inner_text("#empty")
    assert f"ANTHROPIC_BASE_URL={empty.url} claude" in said and f"OPENAI_BASE_URL={empty.url}/v1" in said
    assert "wire_api" in said and page.locator("#conversations").is_hidden()
    _not_blank(page.screenshot(full_page=True))


@needs_chromium
def test_a_probable_misreading_shows_beside_the_page_it_came_from(browser):
    import openai
    from test_misread import NAME, _planted

    from optictx.sample import sample_conversation
    from optictx.serve import ServeConfig

    from serve_peers import Proxy, start_upstream, stop_upstream

    state, server = start_upstream()
    off = NAME.replace("currency", "curency")
    state.reply = f"I changed `{off}` as asked."
    proxy = Proxy(ServeConfig(upstream=state.openai_url, budget=3000, keep_recent=4))
    try:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="key-a", max_retries=0)
        client.chat.completions.create(model="deepseek-ocr", messages=_planted(sample_conversation()))
        page = browser.new_page(viewport={"width": 1400, "height": 1600})
        page.goto(proxy.url + "/optictx/")
        page.wait_for_selector("#conversations tbody tr")
        page.locator("#conversations tbody tr").first.click()
        page.wait_for_selector("#requests tbody tr")
        assert f"{off} \u2192 {NAME}" in page.inner_text("#requests tbody tr")
        page.wait_for_selector("#pages .thumb")
        labels = [t.inner_text() for t in page.locator("#pages .thumb .label").all()]
        marked = [label for label in labels if "misread" in label]
        assert len(marked) == 1 and f"misread: {off} \u2192 {NAME}" in marked[0]
    finally:
        proxy.stop()
        stop_upstream(server)
