"""Hostile requests over HTTP against `optictx serve` (real uvicorn on 127.0.0.1, the tests'
loopback upstream), on a SQLite store folder and on PostgreSQL, counted per class of attack or
fault. What must be 0: bare 500s (or any 5xx not in the API's JSON shape), leaks (another
tenant's data, a secret, a path or a database address in an answer), stalls of another tenant
beyond the bounded wait, acknowledged turns lost, records lost or absurd sums from a poisoned
usage, and an upstream's cookies, hop-by-hop headers or redirects reaching a client. Reflex
weight files damaged at random are counted too (a raw exception or a NaN read instead of a
ReflexError).

    python benchmarks/hostile_http.py [--cases 200] [--seed 0] [--stores sqlite postgres]
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import socket
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the loopback upstream and the throwaway PostgreSQL the tests use

from optictx.serve import ServeConfig  # noqa: E402
from optictx.serve.conversations import CREDENTIAL_HEADERS, tenant_of  # noqa: E402

from hostile_answers import answers  # noqa: E402
from serve_peers import Proxy, raw_exchange, start_upstream, stop_upstream  # noqa: E402

SECRETS = ("PASSWORD", "SECRET", "optictx-hostile-", "127.0.0.1:5", "postgresql://")
HELLO = [{"role": "user", "content": "Fix the failing test in parser.py, please."}]
_STRINGS = ["", " ", "\x00", "\ud800", "a\u2028b", "👩‍👩‍👧", "<|im_start|>", "x" * 3000, "9" * 5000, "{", "-1", "0"]


class Tally:
    def __init__(self) -> None:
        self.counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)

    def answer(self, kind: str, r: httpx.Response, *, ok: tuple[int, ...] = (200, 400, 403, 404, 413, 415, 429, 503),
               store: str = "") -> None:
        c = self.counts[kind]
        c["cases"] += 1
        c.update({"bare 5xx": 0, "leaks": 0})  # shown when 0
        shaped = _shaped(r)
        if r.status_code >= 500 and not shaped:
            c["bare 5xx"] += 1
        elif r.status_code not in ok:
            c[f"unexpected {r.status_code}"] += 1
        if any(s in r.text for s in SECRETS) or (store and store in r.text):
            c["leaks"] += 1


def _shaped(r: httpx.Response) -> bool:
    try:
        body = r.json()
    except ValueError:
        return False
    return isinstance(body, dict) and isinstance(body.get("error"), dict)


ACKED: list[tuple[str, int]] = []  # (conversation, turns) of every answered request


def _chat(url: str, messages=HELLO, headers=None, timeout=30.0, **kw: Any) -> httpx.Response:
    r = httpx.post(url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": messages, **kw},
                   headers=headers or {}, timeout=timeout)
    if r.status_code == 200 and "x-optictx-conversation" in r.headers:
        ACKED.append((r.headers["x-optictx-conversation"], len(messages)))
    return r


def tenancy(url: str, rng: random.Random, t: Tally, n: int) -> None:
    """A conversation under a random credential header; probes from keyless and other keys."""
    for _ in range(n):
        header = rng.choice(CREDENTIAL_HEADERS)
        mine = {header: f"optictx-hostile-{rng.random()}"}
        cid = _chat(url, headers=mine).headers.get("x-optictx-conversation", "")
        for who in ({}, {rng.choice(CREDENTIAL_HEADERS): f"optictx-hostile-other-{rng.random()}"}):
            c = t.counts["tenancy"]
            c["cases"] += 4
            listed = httpx.get(url + "/optictx/api/conversations", headers=who).json()["conversations"]
            c["leaks"] += any(x["id"] == cid for x in listed)
            c["leaks"] += httpx.get(f"{url}/optictx/api/conversations/{cid}", headers=who).status_code != 404
            for path in ("pages", "pages/0.png"):
                c["leaks"] += httpx.get(f"{url}/optictx/api/conversations/{cid}/{path}", headers=who).status_code != 404


def stall(proxy: Proxy, t: Tally) -> None:
    """60 requests wait on one held conversation; another tenant's latency meanwhile."""
    stuck = {"authorization": "Bearer optictx-hostile-stuck"}
    first = _chat(proxy.url, headers=stuck)
    conv = proxy.proxy.conversations.find(tenant_of(stuck), first.headers["x-optictx-conversation"])
    more = [*HELLO, {"role": "assistant", "content": "On it."}, {"role": "user", "content": "And the docs."}]
    c = t.counts["stall"]
    conv.lock.acquire()
    try:
        with ThreadPoolExecutor(64) as pool:
            waiting = [pool.submit(_chat, proxy.url, more, stuck, 120) for _ in range(60)]
            time.sleep(0.5)
            for k in range(10):
                t0 = time.monotonic()
                r = _chat(proxy.url, [{"role": "user", "content": f"other {k}"}], {"authorization": "Bearer b"})
                c["cases"] += 1
                c["stalls"] += time.monotonic() - t0 > 2.0 or r.status_code != 200
            answers = [f.result() for f in waiting]
    finally:
        conv.lock.release()
    for r in answers:
        t.answer("stall", r, ok=(429,))


def _trickled(port: int, head: bytes, pause: float, give_up: float) -> float:
    """Seconds until the proxy closed a connection sending `head` a byte per `pause` (`give_up`
    if it never did)."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=give_up) as s:
        s.setblocking(False)
        for i in range(len(head)):
            if time.monotonic() - start > give_up:
                break
            try:
                s.sendall(head[i:i + 1])
                if s.recv(1) == b"":
                    return time.monotonic() - start
            except BlockingIOError:
                pass
            except OSError:
                return time.monotonic() - start
            time.sleep(pause)
    return give_up


def slow_heads(proxy: Proxy, t: Tally, deadline: float) -> None:
    """50 connections that send their request head a byte every 0.2 s (slowloris), while another
    tenant asks 10 times: each must be closed near the head deadline, no one else slowed."""
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" * 3
    c = t.counts["slow heads"]
    with ThreadPoolExecutor(50) as pool:
        held = [pool.submit(_trickled, proxy.port, head, 0.2, deadline + 10) for _ in range(50)]
        time.sleep(0.5)
        for k in range(10):
            t0 = time.monotonic()
            r = _chat(proxy.url, [{"role": "user", "content": f"meanwhile {k}"}], {"authorization": "Bearer b"})
            c["stalls"] += time.monotonic() - t0 > 2.0 or r.status_code != 200
        for f in held:
            c["cases"] += 1
            c["held past the deadline"] += f.result() > deadline + 2.0


def values(url: str, rng: random.Random, t: Tally, n: int) -> None:
    """Random header values, model names, tools, dashboard ids."""
    for _ in range(n):
        headers = {"x-optictx-budget": rng.choice(_STRINGS), "x-optictx-conversation": rng.choice(_STRINGS)}
        headers = {k: v.encode("utf-8", "surrogatepass").decode("latin-1") for k, v in headers.items()}
        body = {"model": rng.choice(_STRINGS) or "m", "messages": HELLO * rng.randint(1, 3),
                "stream": rng.random() < 0.3}
        if rng.random() < 0.5:
            body["tools"] = rng.choice([7, "run", {"a": 1}, [1], [None], [{"type": "function"}]])
        try:
            r = httpx.post(url + rng.choice(["/v1/chat/completions", "/v1/messages"]),
                           content=json.dumps(body).encode(), headers={**headers, "content-type": "application/json"},
                           timeout=30)
        except (httpx.LocalProtocolError, UnicodeEncodeError):
            continue
        t.answer("values", r)
        cid = rng.choice(["%00", "abc%00", "é" * 3, "..%2F", "x" * 300, "0" * 16])
        t.answer("values", httpx.get(f"{url}/optictx/api/conversations/{cid}"), ok=(307, 404))  # 307: "..%2F"


def browser(url: str, rng: random.Random, t: Tally, n: int) -> None:
    """Cross-site posts and DNS rebinding: every one must be refused (403 or 415)."""
    raw = json.dumps({"model": "gpt-4o", "messages": HELLO}).encode()
    for _ in range(n):
        kind = rng.choice(["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""])
        host = rng.choice([None, "evil.example", "127.0.0.1.evil.example", "attacker.test:8765"])
        origin = rng.choice([None, "http://evil.example", "null"])
        if not kind and host is None and origin is None:
            continue
        headers = {"content-type": kind or "application/json"}
        if host:
            headers["host"] = host
        if origin:
            headers["origin"] = origin
        r = httpx.post(url + "/v1/chat/completions", content=raw, headers=headers)
        t.answer("browser", r, ok=(403, 415))
        if host or origin:
            t.answer("browser", httpx.get(url + "/optictx/api/conversations", headers=headers), ok=(403,))


def framing(port: int, t: Tally) -> None:
    body = json.dumps({"model": "gpt-4o", "messages": HELLO}).encode()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    cases = [head + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(body) + chunked,
             head + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n" + chunked,
             head + b"Content-Length: %d\r\nContent-Length: 7\r\n\r\n" % len(body) + body]
    behind = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    c = t.counts["framing"]
    for case in cases:
        out = raw_exchange(port, case + behind)
        c["cases"] += 1
        c["served behind an ambiguous request"] += out.count(b"HTTP/1.1 ") > 1
        c["ambiguous request answered 200"] += out.startswith(b"HTTP/1.1 200")
    dup = b'{"model": "gpt-4o", "model": "other", "messages": [{"role": "user", "content": "a"}]}'
    r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", content=dup,
                   headers={"content-type": "application/json"})
    t.answer("framing", r, ok=(400,))


def bounds(upstream: Any, t: Tally, store: str | None) -> dict[str, float]:
    """A 16 and a 64 MiB stream without event boundaries through the relay (seconds), an answer
    over the cap, bytes in flight over the cap."""
    out = {}
    p = Proxy(ServeConfig(upstream=upstream.openai_url, budget=3000, store=store, max_answer_bytes=2**20,
                          max_inflight_bytes=64 * 1024, max_body_bytes=48 * 1024, tenancy="per-key"))
    try:
        for mib in (16, 64):
            upstream.stream_body = b"x" * (mib * 2**20)
            t0 = time.monotonic()
            r = _chat(p.url, stream=True, timeout=300)
            out[f"relay {mib} MiB, s"] = round(time.monotonic() - t0, 2)
            t.answer("bounds", r, ok=(200,))
            t.counts["bounds"]["stream bytes lost"] += len(r.content) != mib * 2**20
        upstream.stream_body = None
        upstream.reply = "x" * 2**21
        t.answer("bounds", _chat(p.url), ok=(502,))
        upstream.reply = "Hello."
        slow = socket.create_connection(("127.0.0.1", p.port))
        slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 40000\r\n\r\n" + b" " * 39000)
        time.sleep(0.5)
        t.answer("bounds", _chat(p.url, [{"role": "user", "content": "y" * 40000}]), ok=(503,))
        slow.close()
    finally:
        p.stop()
    return out


_COUNTS = [1e308, 10**308, 10**400, -1, -(10**9), True, 10**12, 10**9, 1.5, "12", None, [3], 2**63]


def money(upstream: Any, proxy: Proxy, rng: random.Random, t: Tally, n: int) -> None:
    """Answers whose usage is poisoned (huge, negative, a bool, a float, a string, cached above
    the prompt, split over two SSE data lines): every answered request keeps its record, no
    absurd count is summed, the dashboard keeps answering."""
    c = t.counts["money"]
    headers = {"authorization": "Bearer hostile-money"}
    tenant = tenant_of(headers)
    for k in range(n):
        usage = {"prompt_tokens": rng.choice(_COUNTS), "completion_tokens": rng.choice(_COUNTS),
                 "prompt_tokens_details": {"cached_tokens": rng.choice(_COUNTS)}}
        answer = {"id": "c", "object": "chat.completion", "created": 1, "model": "gpt-4o", "usage": usage,
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}
        raw = json.dumps(answer).replace("1e+308", "1e308")
        if k % 4 == 3:  # streamed, the usage event's JSON over two data lines
            head, tail = json.dumps({**answer, "choices": [], "object": "chat.completion.chunk"}).split(", ", 1)
            upstream.stream_body = f"data: {head},\ndata: {tail}\n\ndata: [DONE]\n\n".encode()
            r = _chat(proxy.url, [{"role": "user", "content": f"money {k}"}], headers, stream=True)
            upstream.stream_body = None
        else:
            upstream.whole_body = raw.encode()
            r = _chat(proxy.url, [{"role": "user", "content": f"money {k}"}], headers)
            upstream.whole_body = None
        t.answer("money", r, ok=(200,))
    time.sleep(0.5)  # a stream's record is written as it ends
    listed = httpx.get(proxy.url + "/optictx/api/conversations", headers=headers, timeout=30)
    c["dashboard 5xx"] += listed.status_code >= 500
    rows = proxy.proxy.ledger.conversations(tenant) if listed.status_code == 200 else []
    c["records lost"] += n - sum(r["requests"] for r in rows)
    c["absurd sums"] += sum(1 for r in rows for v in r.values() if isinstance(v, float) and not abs(v) < 1e15)


def upstream_headers(upstream: Any, proxy: Proxy, t: Tally) -> None:
    """What an upstream says that a client must not get: its cookies, the headers it names as
    hop-by-hop, a redirect elsewhere; and ten thousand client headers, refused before upstream."""
    c = t.counts["headers"]
    upstream.headers = {"set-cookie": "s=upstream", "connection": "x-hop", "x-hop": "1", "server": "up"}
    r = _chat(proxy.url)
    t.answer("headers", r, ok=(200,))
    c["relayed cookies or hop headers"] += "set-cookie" in r.headers or "x-hop" in r.headers
    c["two Server headers"] += len(r.headers.get_list("server")) > 1
    upstream.headers = {}
    upstream.fail = (307, {"location": "http://elsewhere.example/"})
    r = _chat(proxy.url)
    t.answer("headers", r, ok=(502,))
    c["redirects relayed"] += "location" in r.headers
    before = len(upstream.arrivals)
    for n in (150, 10_000):  # the proxy's bound, then the HTTP server's (it closes the connection)
        try:
            r = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": HELLO},
                           headers=[(f"x-h{i}", "v") for i in range(n)], timeout=30)
            t.answer("headers", r, ok=(400, 431))
        except httpx.TransportError:
            c["closed by the server"] += 1
    c["too many headers forwarded"] += len(upstream.arrivals) > before


def turns_lost(proxy: Proxy, t: Tally) -> None:
    """Every answered request's turns are in its conversation's memory."""
    c = t.counts["acknowledged turns"]
    for cid, turns in ACKED:
        owner = proxy.proxy.ledger.owner(cid)
        conv = None if owner is None else proxy.proxy.conversations.find(owner, cid)
        c["requests checked"] += conv is not None
        c["lost"] += conv is not None and len(conv.memory) < turns
        c["not open (unchecked)"] += conv is None


def reflex(rng: random.Random, t: Tally, n: int, folder: Path) -> None:
    from optictx.models.reflex import CHARSET, ReflexError, ReflexModel, batch_of
    from optictx.models.reflexfile import save

    layers = [{"kind": "conv2d", "relu": True, "pool": [2, 2], "residual": False,
               "ternary": np.ones((4, 1, 3, 3)), "scale": np.full(4, 0.5), "bias": np.zeros(4)},
              {"kind": "conv1d", "relu": False, "pool": None, "residual": False,
               "ternary": np.ones((len(CHARSET) + 1, 32, 1)), "scale": np.full(96, 0.1), "bias": np.zeros(96)}]
    c = t.counts["reflex file"]
    for k in range(n):
        path = folder / f"m{k}.npz"
        save(path, layers, {"seed": k})
        with np.load(path) as f:
            arrays = {name: f[name] for name in f.files}
        meta = json.loads(bytes(arrays["meta"]).decode())
        target = rng.choice(["meta", "array"])
        if target == "meta":
            node = rng.choice([meta, *meta["layers"]])
            node[rng.choice(list(node))] = rng.choice([None, 0, -1, 10**9, 1.5, "x", [0, 0], [], True, float("nan")])
        else:
            name = rng.choice([a for a in arrays if a != "meta"])
            arrays[name] = rng.choice([np.zeros(3, np.float16), np.full(arrays[name].shape, np.nan, np.float16),
                                       arrays[name][:-1], np.zeros(arrays[name].shape, np.int64)])
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
        np.savez(path, **arrays)
        c["cases"] += 1
        try:
            model = ReflexModel.load(path)
            logp = model.logits(batch_of([np.ones((16, 40), np.float32)]))
            c["NaN reads"] += not np.isfinite(logp).all()
            c["loaded and read"] += 1
        except ReflexError:
            c["refused by name"] += 1
        except Exception:
            c["raw exceptions"] += 1


def run(store_kind: str, cases: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    t = Tally()
    state, server = start_upstream()
    cluster = None
    with tempfile.TemporaryDirectory(prefix="optictx-hostile-") as tmp:
        if store_kind == "postgres":
            from pgcluster import Cluster

            cluster = Cluster().start()
            store: str | None = cluster.url(cluster.database())
        else:
            store = str(Path(tmp) / "store")
        proxy = Proxy(ServeConfig(upstream=state.openai_url, anthropic_upstream=state.anthropic_url, budget=3000,
                                  store=store, lock_wait=3.0, tenant_threads=4, tenancy="per-key", head_timeout=2.0))
        ACKED.clear()
        try:
            tenancy(proxy.url, rng, t, cases // 4)
            stall(proxy, t)
            slow_heads(proxy, t, 2.0)
            values(proxy.url, rng, t, cases)
            browser(proxy.url, rng, t, cases // 2)
            framing(proxy.port, t)
            money(state, proxy, rng, t, cases // 4)
            upstream_headers(state, proxy, t)
            turns_lost(proxy, t)
            answered = answers(state, proxy, rng, t, cases)  # "An answer is never lost" (hostile_answers.py)
        finally:
            proxy.stop()
        dead = Proxy(ServeConfig(upstream="http://user:PASSWORD@127.0.0.1:9/v1?api-key=SECRET", budget=3000))
        try:
            for _ in range(10):
                t.answer("secrets", _chat(dead.url), ok=(502,))
        finally:
            dead.stop()
        timings = bounds(state, t, store)
        reflex(rng, t, cases // 2, Path(tmp))
    stop_upstream(server)
    if cluster is not None:
        cluster.stop()
    counts = {k: dict(v) for k, v in t.counts.items()}
    return {"store": store_kind, "counts": counts, "timings": {**timings, **answered}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stores", nargs="+", default=["sqlite", "postgres"])
    args = ap.parse_args()
    for kind in args.stores:
        result = run(kind, args.cases, args.seed)
        print(json.dumps(result, indent=1))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
