"""The dashboard in a real headless browser (Debian's chromium, driven by Playwright): a key
sees its own conversations, the plot and the latest context's contact sheet, never another's."""

from __future__ import annotations

import io
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


@pytest.fixture()
def served(tmp_path):
    import openai

    from optictx.sample import sample_conversation
    from optictx.serve import ServeConfig

    from serve_peers import Proxy, start_upstream, stop_upstream

    state, server = start_upstream()
    proxy = Proxy(ServeConfig(upstream=state.openai_url, budget=2500, keep_recent=4))
    sample = sample_conversation()
    try:
        for key, n in (("key-a", 3), ("key-b", 1)):
            client = openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=0)
            for step in range(n):
                client.chat.completions.create(model="deepseek-ocr", messages=sample[: 60 + 10 * step])
        yield proxy
    finally:
        proxy.stop()
        stop_upstream(server)


@needs_chromium
def test_the_dashboard_shows_a_keys_conversations_plot_and_contact_sheet(served, tmp_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 1400})
            page.goto(served.url + "/optictx/")
            page.fill("#api-key", "key-a")
            page.click("button[type=submit]")
            page.wait_for_selector("#conversations tbody tr")
            rows = page.locator("#conversations tbody tr")
            assert rows.count() == 1  # key-b's conversation is not listed
            assert "3" in rows.first.inner_text()
            assert "saved" in page.inner_text("#totals")
            rows.first.click()
            page.wait_for_selector("#requests tbody tr")
            assert page.locator("#requests tbody tr").count() == 3
            points = page.get_attribute("#plot polyline[data-field=sent]", "points")
            assert points and len(points.split()) == 3
            sheet = page.locator("#sheet")
            for _ in range(100):  # the contact sheet arrives as a blob (the page's CSP forbids eval)
                if sheet.evaluate("img => img.complete && img.naturalWidth") > 0:
                    break
                page.wait_for_timeout(50)
            assert sheet.evaluate("img => img.naturalWidth") > 300
            shot = page.screenshot(full_page=True)
        finally:
            browser.close()
    image = Image.open(io.BytesIO(shot)).convert("L")
    (tmp_path / "dashboard.png").write_bytes(shot)
    low, high = image.getextrema()
    assert high - low > 100, "the screenshot is blank"
    assert len(np.unique(np.asarray(image.resize((64, 64))))) > 20  # text, a plot, thumbnails: not one flat colour
