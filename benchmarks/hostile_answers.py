"""The classes of "An answer is never lost" for `hostile_http.py`: answers whose near misses hold
any character (the header that says them must never drop the connection), a misreading check
given the most work an answer can ask, the MCP endpoint's streams, ids and bodies, `optictx bill`
on hostile transcripts, usage no request could carry, and an upstream that refuses pages. What
must be 0: answers lost, headers that are not printable ASCII, streams held, calls dropped
silently, tracebacks, usage priced that a request could not carry."""

from __future__ import annotations

import contextlib
import io
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from optictx.cli import main as optictx
from optictx.sample import sample_conversation
from optictx.serve.conversations import tenant_of

NAME = "reconcile_refunds_by_currency"
_ODD = ["\x00", "\x01", "\x7f", "\x1b", "\x08", "\r\n", "\u00e9", "\u2028"]


def _planted() -> list[dict[str, Any]]:
    """The sample with NAME said once, early: by the 90th message it is on a page only."""
    messages = [dict(m) for m in sample_conversation()[:90]]
    at = next(i for i, m in enumerate(messages) if m["role"] == "assistant" and m.get("content"))
    messages[at]["content"] += f"\n\nThe helper to change is `{NAME}`."
    return messages


def answers(upstream: Any, proxy: Any, rng: random.Random, t: Any, n: int) -> dict[str, float]:
    """Every class, counted in `t`; the misreading check's longest answer time, in seconds."""
    misread_headers(upstream, proxy, rng, t, n)
    seconds = misread_work(upstream, proxy, t)
    mcp(proxy, t, n)
    usage_sized(upstream, proxy, t)
    bill_readers(t)
    refused(upstream, proxy, t, max(4, n // 10))
    return {"misread check, 200 near misses sharing a prefix (s)": round(seconds, 2)}


def _ask(proxy: Any, key: str, messages: list[dict[str, Any]], **kw: Any) -> httpx.Response | None:
    try:
        return httpx.post(proxy.url + "/v1/chat/completions", timeout=60, headers={"authorization": f"Bearer {key}"},
                          json={"model": "deepseek-ocr", "messages": messages, **kw})
    except httpx.TransportError:
        return None


def misread_headers(upstream: Any, proxy: Any, rng: random.Random, t: Any, n: int) -> None:
    c = t.counts["answers with odd near misses"]
    messages = _planted()
    for _ in range(max(8, n // 10)):
        odd = "".join(rng.choice(_ODD) for _ in range(rng.randint(1, 3)))
        upstream.reply = f"I changed `{NAME[:20]}{odd}{NAME[21:]}` and `https://ci.example.com/b{odd}/42`."
        r = _ask(proxy, "hostile-misread", messages)
        c["cases"] += 1
        c["answers lost"] += r is None or r.status_code != 200 or _said(r) != upstream.reply
        c["misreadings said"] += bool(r is not None and r.headers.get("x-optictx-misread"))
        header = r.headers.get("x-optictx-misread", "") if r is not None else ""
        c["headers not printable ASCII"] += not all(" " <= ch <= "~" for ch in header)
    upstream.reply = "Hello from upstream, streamed in pieces."


def _said(r: httpx.Response) -> str | None:
    """The answer's text, as the client reads it (JSON escapes a NUL: the bytes never hold one)."""
    try:
        return r.json()["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def misread_work(upstream: Any, proxy: Any, t: Any) -> float:
    """200 quoted near misses of identifiers that share a prefix: the answer's time."""
    c = t.counts["misread check bound"]
    names = [f"{NAME}_{k:04d}x" for k in range(400)]
    messages = []
    for i in range(0, len(names), 20):
        messages += [{"role": "user", "content": "List the helpers."},
                     {"role": "assistant", "content": "\n".join(f"`{x}`" for x in names[i : i + 20])}]
    messages += [{"role": "user", "content": f"step {i}"} if i % 2 == 0 else
                 {"role": "assistant", "content": "ok " * 30} for i in range(40)]
    upstream.reply = " ".join(f"`{x[:-1]}y`" for x in names[:200])
    t0 = time.perf_counter()
    r = _ask(proxy, "hostile-work", messages)
    seconds = time.perf_counter() - t0
    c["cases"] += 1
    c["answers lost"] += r is None or r.status_code != 200
    c["over 5 s"] += seconds > 5
    upstream.reply = "Hello from upstream, streamed in pieces."
    return seconds


def mcp(proxy: Any, t: Any, n: int) -> None:
    c = t.counts["mcp"]
    accept = {"accept": "application/json, text/event-stream"}
    with httpx.Client(base_url=proxy.url, timeout=5) as http:
        for _ in range(max(10, n // 4)):
            c["cases"] += 1
            try:
                c["streams held"] += http.get("/mcp", headers={"accept": "text/event-stream"}).status_code != 405
            except httpx.TimeoutException:
                c["streams held"] += 1
        for bad in ({"an": "object"}, [1], True, 1.5):
            c["cases"] += 1
            r = http.post("/mcp", json={"jsonrpc": "2.0", "id": bad, "method": "tools/list"}, headers=accept)
            c["calls dropped silently"] += r.status_code == 202
            c["bare 5xx"] += r.status_code >= 500
        c["cases"] += 1
        big = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"pad": "x" * (40 * 2**20)}}
        r = http.post("/mcp", json=big, headers=accept, timeout=60)
        c["bodies over --max-body-bytes taken"] += r.status_code not in (413, 503)


def usage_sized(upstream: Any, proxy: Any, t: Any) -> None:
    """90,000 input tokens for a 200-byte request, and an OpenAI usage detail that is a string."""
    c = t.counts["usage no request could carry"]
    key = "hostile-sized"
    for usage in ({"prompt_tokens": 90_000, "completion_tokens": 1},
                  {"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": "lots"}):
        upstream.whole_body = json.dumps({"id": "c", "object": "chat.completion", "created": 1, "model": "gpt-4o",
                                          "usage": usage, "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                              "role": "assistant", "content": "ok"}}]}).encode()
        r = _ask(proxy, key, [{"role": "user", "content": f"sized {len(c)}"}])
        upstream.whole_body = None
        c["cases"] += 1
        c["answers lost"] += r is None or r.status_code != 200
    time.sleep(0.3)
    tenant = tenant_of({"authorization": f"Bearer {key}"})
    rows = [r for conv in proxy.proxy.ledger.conversations(tenant)
            for r in proxy.proxy.ledger.requests(tenant, conv["id"])]
    c["priced as fact"] += sum(1 for r in rows if r["billed"] is not None)


def bill_readers(t: Any) -> None:
    """`optictx bill` on transcripts of the wrong shape: an error naming the field, never a traceback."""
    c = t.counts["bill on hostile transcripts"]
    user = {"type": "user", "sessionId": "s", "message": {"role": "user", "content": "hi"}}

    def assistant(usage: dict[str, Any]) -> dict[str, Any]:
        return {"type": "assistant", "sessionId": "s", "message": {"id": "m", "role": "assistant", "content": "ok",
                                                                   "usage": usage}}
    cases = [[user, {"type": "api-request-shape", "shape": {"system": [5, None]}}, assistant({"input_tokens": 3})],
             [user, {"type": "api-request-shape", "shape": {"tools": "all"}}, assistant({"input_tokens": 3})],
             [user, assistant({k: 10**9 for k in ("input_tokens", "cache_read_input_tokens",
                                                  "cache_creation_input_tokens")})]]
    with tempfile.TemporaryDirectory() as tmp:
        for k, records in enumerate(cases):
            path = Path(tmp) / f"t{k}.jsonl"
            path.write_text("".join(json.dumps(r) + "\n" for r in records))
            err = io.StringIO()
            c["cases"] += 1
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                    code = optictx(["bill", str(path)])
            except (Exception, MemoryError):  # what must not happen: counted, not raised
                code = -1
            c["crashes or tracebacks"] += code not in (0, 2) or "Traceback" in err.getvalue()


def refused(upstream: Any, proxy: Any, t: Any, n: int) -> None:
    """An upstream that refuses every request carrying images: the client gets every answer."""
    c = t.counts["pages refused upstream"]
    upstream.refuse_images = 400
    messages = sample_conversation()
    try:
        for k in range(n):
            r = _ask(proxy, "hostile-refused", messages[: 60 + 2 * k], model="gpt-4o")
            c["cases"] += 1
            c["answers lost"] += r is None or r.status_code != 200
    finally:
        upstream.refuse_images = 0
