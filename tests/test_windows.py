"""The proxy's cap follows the request's model: its context window less its longest answer, below
any long-context price tier (the numbers here are the providers' model pages, not the registry
read back), unless `--budget` or X-Optictx-Budget says otherwise; a model nobody listed keeps
the old cap."""

from __future__ import annotations

import pytest
from conftest import needs

from optictx.windows import DEFAULT_CAP, WINDOWS, cap_for, window_for

# (model as a client sends it, context window, longest answer, long-context tier): the providers'
# model pages.
DOCUMENTED = [("claude-opus-5-5", 1_000_000, 128_000, None), ("claude-sonnet-4-5-20250929", 200_000, 64_000, 200_000),
              ("claude-haiku-4-5-20251001", 200_000, 64_000, None), ("gpt-4o-mini", 128_000, 16_384, None),
              ("gpt-5.5", 1_050_000, 128_000, 272_000), ("gpt-5", 400_000, 128_000, None)]


@pytest.mark.parametrize(("model", "context", "output", "tier"), DOCUMENTED)
def test_each_model_s_cap_is_its_window_less_its_answer_and_below_its_tier(model, context, output, tier):
    assert cap_for(model) == min(context - output, tier or context)


def test_a_model_nobody_listed_keeps_the_old_cap_and_every_line_says_where_it_was_read():
    assert window_for("claude-nobody-knows-9") is None and cap_for("claude-nobody-knows-9") == DEFAULT_CAP == 128_000
    assert cap_for(None) == cap_for("") == DEFAULT_CAP
    assert all(w.source and "read 2026" in w.source and w.cap > 0 for w in WINDOWS.values())


@needs("starlette", "serve")
@needs("uvicorn", "serve")
@needs("httpx", "serve")
def test_the_proxy_caps_each_request_at_its_model_s_unless_told(upstream):
    from optictx.serve import ServeConfig
    from optictx.serve.proxy import Proxy as Core

    plain = Core(ServeConfig(upstream=upstream.openai_url))
    assert plain.settings({}, "claude-opus-5-5")[1] == 872_000
    assert plain.settings({}, "gpt-4o")[1] == 128_000 - 16_384
    assert plain.settings({"x-optictx-budget": "5000"}, "claude-opus-5-5")[1] == 5000
    told = Core(ServeConfig(upstream=upstream.openai_url, budget=64_000))
    assert told.settings({}, "claude-opus-5-5")[1] == 64_000
