"""A refused page is never a failed request: an upstream that refuses every request carrying
images (as a provider did after a model update) still answers the client, from the conversation
sent as the client sent it; the ledger and the header say the pages were refused; after a few
refusals that model's requests go as they came for a while, and say so. The oracle is what the
upstream received and answered."""

from __future__ import annotations

import pytest
from conftest import needs

pytestmark = [needs("starlette", "serve"), needs("uvicorn", "serve"), needs("httpx", "serve")]

from optictx.serve import ServeConfig  # noqa: E402
from optictx.serve.conversations import tenant_of  # noqa: E402
from optictx.serve.refusals import TIMES, refused  # noqa: E402

from serve_peers import Proxy  # noqa: E402

openai = pytest.importorskip("openai")


def _imaged(body: dict) -> bool:
    return "image_url" in str(body)


@pytest.mark.parametrize("status", [400, 413])
def test_refused_pages_go_again_as_the_client_sent_them_and_then_pause(upstream, sample, status):
    upstream.refuse_images = status
    proxy = Proxy(ServeConfig(upstream=upstream.openai_url, budget=3000, keep_recent=4, tenancy="per-key"))
    try:
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="key-a", max_retries=0)
        answers = []
        for n in range(60, 60 + 2 * (TIMES + 1), 2):
            raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=sample[:n])
            answers.append((raw.parse().choices[0].message.content, raw.headers.get("x-optictx-fallback", "")))
        assert all(text == upstream.reply for text, _ in answers)  # the client got every answer
        said = [why for _, why in answers]
        assert all(w.startswith("refused: HTTP") for w in said[:TIMES]), said
        assert said[TIMES].startswith("pages-paused: gpt-4o refused pages"), said
        sent = [a.body for a in upstream.arrivals if a.path == "/v1/chat/completions"]
        # Each refused request went twice, the second time as the client sent it; paused, once.
        assert [_imaged(b) for b in sent] == [True, False] * TIMES + [False]
        assert all(b["messages"] == sample[:60 + 2 * k] for k, b in enumerate(sent[1 : 2 * TIMES : 2]))
        tenant = tenant_of({"authorization": "Bearer key-a"})
        rows = [r for c in proxy.proxy.ledger.conversations(tenant) for r in proxy.proxy.ledger.requests(tenant,
                                                                                                        c["id"])]
        assert sum(1 for r in rows if r["refused"] and "Could not process image" in r["refused"]) == TIMES
    finally:
        proxy.stop()


@pytest.mark.parametrize(("status", "body", "why"), [
    (400, b'{"error": {"message": "messages.3.content.1.image: image exceeds 5 MB maximum"}}', "HTTP 400"),
    (413, b'{"type": "error", "error": {"type": "request_too_large", "message": "Request exceeds the maximum size"}}',
     "HTTP 413"),
    (200, b'{"type": "message", "stop_reason": "refusal", "content": []}', "refused to answer"),
    (200, b'{"choices": [{"message": {"role": "assistant", "content": null, "refusal": "I cannot."}}]}',
     "refused to answer"),
    (400, b'{"error": {"message": "max_tokens: must be a positive integer"}}', None),
    (500, b'{"error": {"message": "image service down"}}', None),
    (200, b'{"type": "message", "stop_reason": "end_turn", "content": []}', None)])
def test_what_counts_as_refusing_the_pages(status, body, why):
    said = refused(status, body)
    assert (said is None) if why is None else (why in said)
