"""The money the proxy shows is the money the provider charges: a conversation through the
proxy against an upstream that reports usage as Anthropic counts it (`provider_cache.py`, from
Anthropic's documented rules), priced at the model's listed prices (genai-prices' data), beside
the same requests sent as they came to a second such upstream. The oracles are those two
upstreams' usage and the listed prices, never the proxy's meter."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from conftest import needs

pytestmark = [needs("starlette", "serve"), needs("uvicorn", "serve"), needs("httpx", "serve"),
              needs("genai_prices", "serve")]

from optictx.serve import ServeConfig  # noqa: E402
from optictx.serve.conversations import tenant_of  # noqa: E402

from provider_cache import AnthropicCache  # noqa: E402
from serve_peers import Proxy, start_upstream, stop_upstream, to_anthropic_messages  # noqa: E402

anthropic = pytest.importorskip("anthropic")
MARK = {"type": "ephemeral"}


def _listed(model: str):
    from genai_prices.data_snapshot import get_snapshot

    _, info = get_snapshot().find_provider_model(model, None, "anthropic", None)
    p = info.get_prices(datetime.now(timezone.utc))
    return {k: float(getattr(getattr(p, k), "base", getattr(p, k)))
            for k in ("input_mtok", "cache_read_mtok", "cache_write_mtok", "cache_write_1h_mtok")}


def _invoice(usage: dict, prices: dict) -> float:
    """What the usage costs at the listed prices, as an invoice adds it up."""
    hour = usage["cache_creation"]["ephemeral_1h_input_tokens"]
    return (usage["input_tokens"] * prices["input_mtok"] + usage["cache_read_input_tokens"] * prices["cache_read_mtok"]
            + (usage["cache_creation_input_tokens"] - hour) * prices["cache_write_mtok"]
            + hour * prices["cache_write_1h_mtok"]) / 1e6


def _controls(body: dict):
    system = body["system"] if isinstance(body.get("system"), list) else []
    blocks = [*system, *(b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"])]
    return [b["cache_control"] for b in blocks if isinstance(b, dict) and "cache_control" in b]


def _requests(sample, count: int, ttl: str | None):
    """Bodies as Claude Code sends them: its system prompt and its newest block marked."""
    mark = {**MARK, "ttl": ttl} if ttl else MARK
    ends = [n for n in range(30, len(sample))
            if sample[n]["role"] == "assistant" and sample[n - 1]["role"] != "assistant"]
    for n in ends[:count]:
        system, messages = to_anthropic_messages(sample[:n])
        last = messages[-1]["content"]
        last[-1] = {**last[-1], "cache_control": mark}
        yield [{"type": "text", "text": system * 6, "cache_control": mark}], messages


@pytest.fixture()
def counted():
    """Two upstreams that count as Anthropic does: one behind the proxy, one taking the client's
    requests as they came."""
    behind, server = start_upstream()
    direct, server2 = start_upstream()
    behind.cache, direct.cache = AnthropicCache(), AnthropicCache()
    proxy = Proxy(ServeConfig(upstream=behind.openai_url, anthropic_upstream=behind.anthropic_url, budget=6000,
                              keep_recent=4, tenancy="per-key"))
    yield proxy, behind, direct
    proxy.stop()
    stop_upstream(server)
    stop_upstream(server2)


@pytest.mark.parametrize(("model", "ttl"), [("claude-opus-5-5", None), ("claude-sonnet-4-5", None),
                                            ("claude-opus-5-5", "1h")])
def test_the_modeled_bill_is_the_invoice_and_saved_has_its_sign(counted, sample, model, ttl):
    proxy, behind, direct = counted
    through = anthropic.Anthropic(base_url=proxy.url, api_key="key-m", max_retries=0)
    plain = anthropic.Anthropic(base_url=direct.anthropic_url, api_key="key-m", max_retries=0)
    prices = _listed(model)
    billed_through = billed_direct = 0.0
    events = []
    for system, messages in _requests(sample, 40, ttl):
        raw = through.messages.with_raw_response.create(model=model, max_tokens=20, system=system, messages=messages)
        events.append(raw.headers["x-optictx-event"])
        billed_through += _invoice(raw.parse().usage.model_dump(), prices)
        billed_direct += _invoice(plain.messages.create(model=model, max_tokens=20, system=system,
                                                        messages=messages).usage.model_dump(), prices)
    assert {"paid", "forced"} & set(events) and events.count("append") > 10, events  # it compacted, then appended
    for arrival in behind.arrivals:  # Anthropic takes 1-hour entries only before 5-minute ones
        ttls = [c.get("ttl", "5m") for c in _controls(arrival.body)]
        assert ttls == sorted(ttls, key=lambda t: t != "1h"), ttls
    [conv] = proxy.proxy.ledger.conversations(tenant_of({"x-api-key": "key-m"}))
    assert conv["estimated"] == 0  # the model's own prices
    assert conv["billed_usd"] == pytest.approx(billed_through, rel=1e-6)  # the ledger prices usage as listed
    assert conv["cost_usd"] == pytest.approx(billed_through, rel=0.03)  # modeled through optictx: the invoice
    assert conv["passthrough_usd"] == pytest.approx(billed_direct, rel=0.03)  # modeled as it came: its invoice
    shown = 1 - conv["billed_usd"] / conv["came_billed_usd"]  # the dashboard's headline "saved"
    real = 1 - billed_through / billed_direct
    assert shown == pytest.approx(real, abs=0.03) and (abs(real) < 0.01 or (shown > 0) == (real > 0))


@pytest.mark.parametrize(("system", "last", "ours"), [("1h", "1h", "1h"), ("1h", "5m", "5m"), ("5m", "5m", "5m"),
                                                      (None, "1h", "1h")])
def test_our_breakpoints_live_as_long_as_the_client_s(system, last, ours):
    """Where the client's cache lives an hour, so does ours, and never a 1-hour entry after a
    5-minute one (Anthropic refuses that order)."""
    from optictx.export import MARK
    from optictx.serve.anthropic_api import _breakpoints

    def mark(ttl):
        return {"cache_control": {**MARK, "ttl": "1h"} if ttl == "1h" else dict(MARK)}

    body = {"system": [{"type": "text", "text": "rules", **(mark(system) if system else {})}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "page", "cache_control": MARK}]},
                         {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
                         {"role": "user", "content": [{"type": "text", "text": "now", **mark(last)}]}]}
    client = {"messages": [{"role": "user", "content": [{"type": "text", "text": "now", **mark(last)}]}]}
    from optictx.serve.anthropic_api import ttl

    _breakpoints(body, False, ttl(client))
    ttls = [c.get("ttl", "5m") for c in _controls(body)]
    assert ttls == sorted(ttls, key=lambda t: t != "1h")
    assert body["messages"][0]["content"][0]["cache_control"].get("ttl", "5m") == ours


def test_after_refused_pages_the_modeled_bill_is_still_the_invoice(counted, sample):
    """Pages refused once: the request went again as the client sent it, and that is what the
    provider's cache then holds; the model of the cache follows it (it had gone on from the
    refused prompt, reading back pages the provider never kept)."""
    proxy, behind, _ = counted
    through = anthropic.Anthropic(base_url=proxy.url, api_key="key-r", max_retries=0)
    prices = _listed("claude-opus-5-5")
    billed, refused = 0.0, 0
    for system, messages in _requests(sample, 40, None):
        raw = through.messages.with_raw_response.create(model="claude-opus-5-5", max_tokens=20, system=system,
                                                        messages=messages)
        billed += _invoice(raw.parse().usage.model_dump(), prices)
        if raw.headers.get("x-optictx-fallback", "").startswith("refused"):
            refused += 1
        behind.refuse_images = 400 if refused == 0 and raw.headers.get("x-optictx-event") == "append" else 0
    assert refused == 1
    [conv] = proxy.proxy.ledger.conversations(tenant_of({"x-api-key": "key-r"}))
    assert conv["billed_usd"] == pytest.approx(billed, rel=1e-6)
    assert conv["cost_usd"] == pytest.approx(billed, rel=0.03)
