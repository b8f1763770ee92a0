"""`optictx serve` under attack and under faults, one section per class of failure: tenants that
leak, a stuck conversation that stalls everyone, secrets in errors, bare 500s, browser attacks
on a local proxy, unbounded work. Real uvicorn on 127.0.0.1, the real upstream peer
(tests/serve_peers.py), raw sockets where the attack is in the framing."""

from __future__ import annotations

import json
import socket
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import needs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = [needs("starlette", "serve"), needs("uvicorn", "serve"), needs("httpx", "serve")]

import httpx  # noqa: E402

from optictx.serve import ServeConfig  # noqa: E402
from optictx.serve.conversations import CREDENTIAL_HEADERS, tenant_of  # noqa: E402

from serve_peers import Proxy, raw_exchange  # noqa: E402

JSON = {"content-type": "application/json"}
HELLO = [{"role": "user", "content": "Fix the failing test in parser.py, please."}]


def _serve(upstream, **settings_):
    return Proxy(ServeConfig(upstream=upstream.openai_url, anthropic_upstream=upstream.anthropic_url,
                             **{"budget": 3000, "tenancy": "per-key", **settings_}))


@pytest.fixture()
def proxy(upstream):
    p = _serve(upstream)
    yield p
    p.stop()


def _chat(url: str, messages=HELLO, headers=None, timeout=30.0, **kw) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": messages, **kw},
                      headers=headers or {}, timeout=timeout)


def _listed(url: str, headers: dict[str, str]) -> list[str]:
    r = httpx.get(url + "/optictx/api/conversations", headers=headers)
    assert r.status_code == 200, r.text
    return [c["id"] for c in r.json()["conversations"]]


def _is_api_error(r: httpx.Response) -> bool:
    body = r.json()
    return isinstance(body.get("error"), dict) and isinstance(body["error"].get("message"), str)


# -- 1. tenants from every credential header ------------------------------------------------------

@pytest.mark.parametrize("header", CREDENTIAL_HEADERS)
def test_every_credential_header_is_a_tenant_of_its_own(proxy, header):
    mine = {header: "Bearer secret-a" if header.endswith("authorization") else "secret-a"}
    r = _chat(proxy.url, headers=mine)
    assert r.status_code == 200
    cid = r.headers["x-optictx-conversation"]
    assert _listed(proxy.url, mine) == [cid]
    assert _listed(proxy.url, {}) == []  # no credential: the keyless tenant sees none of it
    other = {header: "secret-b"}
    assert _listed(proxy.url, other) == []
    for who in ({}, other):
        assert httpx.get(f"{proxy.url}/optictx/api/conversations/{cid}", headers=who).status_code == 404
        for path in ("pages", "pages/0.webp"):
            assert httpx.get(f"{proxy.url}/optictx/api/conversations/{cid}/{path}", headers=who).status_code == 404
    # The same history from a keyless client is its own conversation, never this one's memory.
    assert _chat(proxy.url).headers["x-optictx-conversation"] != cid


@settings(max_examples=60, deadline=None)
@given(a=st.dictionaries(st.sampled_from(CREDENTIAL_HEADERS), st.text("abcXYZ-_.", min_size=1, max_size=8),
                         max_size=3),
       b=st.dictionaries(st.sampled_from(CREDENTIAL_HEADERS), st.text("abcXYZ-_.", min_size=1, max_size=8),
                         max_size=3))
def test_two_callers_share_a_tenant_only_when_they_present_the_same_secrets(a, b):
    secrets_a, secrets_b = set(a.values()), set(b.values())
    assert (tenant_of(a) == tenant_of(b)) == (secrets_a == secrets_b)


# -- 2. one stuck conversation stalls nobody else ---------------------------------------------------

def test_a_stuck_conversation_never_stalls_another_tenant(upstream):
    p = _serve(upstream, lock_wait=3.0, tenant_threads=4)
    try:
        stuck = {"authorization": "Bearer tenant-a"}
        first = _chat(p.url, headers=stuck)
        conv = p.proxy.conversations.find(tenant_of(stuck), first.headers["x-optictx-conversation"])
        more = [*HELLO, {"role": "assistant", "content": "On it."}, {"role": "user", "content": "And the docs."}]
        conv.lock.acquire()  # as a request that never ends would hold it
        try:
            with ThreadPoolExecutor(64) as pool:
                waiting = [pool.submit(_chat, p.url, more, stuck) for _ in range(60)]  # more than the 40 threads
                time.sleep(0.5)
                latencies = []
                for n in range(5):
                    t0 = time.monotonic()
                    r = _chat(p.url, [{"role": "user", "content": f"another tenant, {n}"}],
                              {"authorization": "Bearer tenant-b"})
                    latencies.append(time.monotonic() - t0)
                    assert r.status_code == 200
                t0 = time.monotonic()
                answers = [f.result() for f in waiting]
                waited = time.monotonic() - t0
        finally:
            conv.lock.release()
        assert max(latencies) < 2.0, latencies  # served meanwhile, not after the stuck ones
        assert {r.status_code for r in answers} == {429}
        assert all(r.headers["retry-after"] == "1" and _is_api_error(r) for r in answers)
        assert waited < 3.0 * 60 / 4 + 10  # bounded: each wait is at most lock_wait, 4 at a time
    finally:
        p.stop()


def test_no_lock_shared_by_all_conversations_is_held_across_a_reopen_or_a_ledger_query(upstream, tmp_path):
    """A reopen replays a conversation's turns and the ledger may be a database away: under the
    proxy-wide lock either would stall every tenant. Two requests for one closed conversation
    reopen it once."""
    p = _serve(upstream, store=str(tmp_path / "store"), max_open=1)
    try:
        convs = p.proxy.conversations
        held: list[str] = []
        reopened: list[str] = []
        reopen, longest = convs._reopen, convs.ledger.longest

        def watched_reopen(spec):
            held.append("reopen") if convs._lock.locked() else None
            reopened.append(str(spec))
            time.sleep(0.3)  # a long replay: the other request arrives meanwhile
            return reopen(spec)

        def watched_longest(digests):
            held.append("ledger") if convs._lock.locked() else None
            return longest(digests)

        convs._reopen, convs.ledger.longest = watched_reopen, watched_longest
        a = {"authorization": "Bearer tenant-a"}
        assert _chat(p.url, headers=a).status_code == 200
        assert _chat(p.url, headers={"authorization": "Bearer tenant-b"}).status_code == 200  # closes a's
        more = [*HELLO, {"role": "assistant", "content": "On it."}, {"role": "user", "content": "And the docs."}]
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda _: _chat(p.url, more, a), range(2)))
        assert [r.status_code for r in answers] == [200, 200]
        assert held == [] and len(reopened) == 1
    finally:
        p.stop()


def test_a_bug_under_the_ledger_is_not_called_the_store_being_down(tmp_path):
    from optictx.errors import StoreError
    from optictx.serve.ledger import Ledger

    ledger = Ledger(tmp_path / "serve")
    try:
        with pytest.raises(KeyError):  # a query the code got wrong: a bug, logged as one (a 500)
            ledger._run("SELECT {nothing}")
        with pytest.raises(StoreError):  # what the database refuses: the store's trouble (a 503)
            ledger._run("SELECT * FROM no_such_table")
    finally:
        ledger.close()


# -- 3. secrets and internals stay out of errors ----------------------------------------------------

def test_an_upstream_url_with_credentials_is_never_shown(upstream):
    dead = "http://user:PASSWORD@127.0.0.1:9/v1?api-key=SECRET"
    p = Proxy(ServeConfig(upstream=dead, budget=3000))
    try:
        r = _chat(p.url)
        assert r.status_code == 502 and _is_api_error(r)
        assert "PASSWORD" not in r.text and "SECRET" not in r.text and "user" not in r.text
        assert "http://127.0.0.1:9/v1" in r.json()["error"]["message"]
    finally:
        p.stop()


def test_a_damaged_store_is_a_503_that_names_no_path(upstream, tmp_path):
    store = tmp_path / "private-folder-name"
    p = _serve(upstream, store=str(store), max_open=1)
    try:
        first = _chat(p.url, headers={"authorization": "Bearer k"})
        cid = first.headers["x-optictx-conversation"]
        _chat(p.url, [{"role": "user", "content": "something else"}], {"authorization": "Bearer k"})  # closes cid
        for f in store.rglob(f"*{cid}*"):
            if f.is_file():
                f.write_bytes(b"this is not an optictx memory" * 100)
        more = [*HELLO, {"role": "assistant", "content": "On it."}, {"role": "user", "content": "Go on."}]
        r = _chat(p.url, more, {"authorization": "Bearer k"})
        assert r.status_code == 503 and _is_api_error(r) and r.headers["retry-after"]
        assert "private-folder-name" not in r.text and str(tmp_path) not in r.text
        assert "incident" in r.json()["error"]["message"]
    finally:
        p.stop()


# -- 4. never a bare 500 ------------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", ["\ud800", "a\x00b", "x" * 5000])
def test_a_paid_answer_reaches_the_client_whatever_the_model_name(upstream, tmp_path, model, stream):
    p = _serve(upstream, store=str(tmp_path / "s"))
    try:
        raw = json.dumps({"model": model, "messages": HELLO, "stream": stream}).encode()  # \ud800: valid JSON
        r = httpx.post(p.url + "/v1/chat/completions", content=raw, headers=JSON)
        assert r.status_code == 200 and "Hello" in r.text
        assert len(upstream.arrivals) == 1
        (row,) = p.proxy.ledger.conversations(tenant_of({}))
        assert row["requests"] == 1  # and it was recorded, the name made storable
    finally:
        p.stop()


def test_a_paid_answer_reaches_the_client_when_its_record_cannot_be_stored(upstream, tmp_path):
    p = _serve(upstream, store=str(tmp_path / "s"))
    try:
        before = httpx.get(p.url + "/optictx/api/status").json()["incidents"].get("answer relayed, record lost", 0)
        upstream.delay = 1.0
        box: list[httpx.Response] = []
        t = threading.Thread(target=lambda: box.append(_chat(p.url, timeout=60)))
        t.start()
        time.sleep(0.5)  # the request is with the upstream: its turns are in, its record is not
        ledger = sqlite3.connect(tmp_path / "s" / "optictx-serve.db", isolation_level=None)
        ledger.execute("BEGIN EXCLUSIVE")  # another process holds the proxy's records for long
        try:
            t.join(60)
        finally:
            ledger.execute("ROLLBACK")
            ledger.close()
        assert box[0].status_code == 200 and "Hello" in box[0].text
        after = httpx.get(p.url + "/optictx/api/status").json()["incidents"]["answer relayed, record lost"]
        assert after == before + 1  # counted, not only logged
    finally:
        p.stop()


@pytest.mark.parametrize("tools", [7, "run", {"name": "run"}, [1, 2], [None]])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_tools_that_are_not_a_list_of_objects_go_as_they_came(proxy, upstream, tools, path):
    """The proxy cannot take the tools' room from the budget, nor say they are wrong (the
    upstream may take them): the request goes as it came, saying where, and nothing is kept."""
    body = {"model": "claude-sonnet-4", "max_tokens": 10, "messages": HELLO * 3, "tools": tools}
    raw = json.dumps(body).encode()
    r = httpx.post(proxy.url + path, content=raw, headers={"x-optictx-budget": "50", **JSON})
    assert r.status_code == 200 and r.headers["x-optictx-fallback"] == "unknown-shape: tools"
    assert [a.raw for a in upstream.arrivals] == [raw]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(budget=st.one_of(st.text(max_size=30), st.integers(-10, 10**9).map(str),
                        st.integers(1, 5000).map(lambda n: "9" * n)),
       name=st.text(max_size=30))
def test_any_header_value_is_an_answer_in_the_apis_shape(proxy, budget, name):
    headers = {"x-optictx-budget": budget, "x-optictx-conversation": name}
    try:
        r = _chat(proxy.url, headers={k: v.encode("utf-8", "surrogatepass").decode("latin-1", "replace")
                                      for k, v in headers.items()})
    except (httpx.LocalProtocolError, UnicodeEncodeError):
        return  # a header value the client itself refuses to send
    assert r.status_code in (200, 400), (r.status_code, r.text[:200])
    assert r.status_code == 200 or _is_api_error(r)


@pytest.mark.parametrize("cid", ["%00", "abc%00def", "0123456789abcdef%00", "..%2F..", "x" * 300])
def test_a_strange_dashboard_id_is_a_404(proxy, cid):
    r = httpx.get(f"{proxy.url}/optictx/api/conversations/{cid}")
    assert r.status_code == 404 and _is_api_error(r)


# -- 5. browser attacks on a local proxy ------------------------------------------------------------

@pytest.mark.parametrize("kind", ["text/plain", "application/x-www-form-urlencoded",
                                  "multipart/form-data; boundary=x", "", "application/jsonx"])
def test_a_body_that_is_not_declared_json_is_refused(proxy, upstream, kind):
    raw = json.dumps({"model": "gpt-4o", "messages": HELLO}).encode()
    r = httpx.post(proxy.url + "/v1/chat/completions", content=raw, headers={"content-type": kind} if kind else {})
    assert r.status_code == 415 and _is_api_error(r) and not upstream.arrivals


@pytest.mark.parametrize("headers", [{"host": "evil.example"}, {"host": "evil.example:8765"},
                                     {"host": "127.0.0.1.evil.example"},
                                     {"origin": "http://evil.example"}, {"origin": "null"}])
@pytest.mark.parametrize("path", ["/optictx/api/conversations", "/v1/chat/completions"])
def test_a_web_page_can_neither_post_through_nor_read_a_local_proxy(proxy, upstream, headers, path):
    if path.startswith("/v1"):
        r = httpx.post(proxy.url + path, json={"model": "gpt-4o", "messages": HELLO}, headers=headers)
    else:
        r = httpx.get(proxy.url + path, headers=headers)
    assert r.status_code == 403 and _is_api_error(r) and not upstream.arrivals


def test_loopback_names_and_origins_are_served(proxy):
    for headers in ({"host": "localhost"}, {"host": f"127.0.0.1:{proxy.port}"}, {"host": "[::1]:80"},
                    {"origin": f"http://127.0.0.1:{proxy.port}"}, {"origin": "http://localhost:3000"}):
        assert _chat(proxy.url, headers=headers).status_code == 200, headers


def test_with_a_proxy_key_any_host_is_served(upstream):
    key = "k" * 20
    p = Proxy(ServeConfig(upstream=upstream.openai_url, budget=3000, proxy_key=key))
    try:
        assert _chat(p.url, headers={"host": "proxy.internal", "x-optictx-key": key}).status_code == 200
    finally:
        p.stop()


# -- 6. framing, duplicate keys, headers that pass for the proxy's --------------------------------------

def test_a_request_framed_two_ways_is_refused_and_its_connection_closed(proxy, upstream):
    body = json.dumps({"model": "gpt-4o", "messages": HELLO}).encode()
    smuggled = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
                + f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n")
    behind = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    out = raw_exchange(proxy.port, smuggled + behind)
    assert out.count(b"HTTP/1.1 ") <= 1 and not upstream.arrivals  # the one behind it is never served
    assert not out or out.startswith(b"HTTP/1.1 400")


def _trickle(port: int, head: bytes, pause: float, then: bytes = b"") -> tuple[float, bytes]:
    """`head` sent a byte every `pause` seconds, then `then` at once: (seconds until the proxy
    closed the connection or answered, what came back)."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            for i in range(len(head)):
                s.sendall(head[i:i + 1])
                time.sleep(pause)
            s.sendall(then)
            return time.monotonic() - start, s.recv(65536)
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - start, b""


def test_a_request_head_sent_too_slowly_is_cut_off_and_others_are_served_meanwhile(upstream):
    p = _serve(upstream, budget=3000, head_timeout=1.0)
    try:
        body = json.dumps({"model": "gpt-4o", "messages": HELLO}).encode()
        head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % len(body))
        with ThreadPoolExecutor(1) as pool:
            slow = pool.submit(_trickle, p.port, head, 0.1, body)  # about 10 s to send its head
            time.sleep(0.3)
            assert _chat(p.url).status_code == 200  # another client, served while it trickles
            took, out = slow.result()
        assert out == b"" and took < 3.0 and not upstream.arrivals[1:]  # closed at about 1 s, never relayed
        # A head that comes in time, then a body that takes longer than the head's deadline: served.
        with socket.create_connection(("127.0.0.1", p.port), timeout=10) as s:
            s.sendall(head)
            for i in range(0, len(body), 8):
                s.sendall(body[i:i + 8])
                time.sleep(1.5 / (len(body) / 8))
            assert s.recv(65536).startswith(b"HTTP/1.1 200")
            # The next request on this kept-alive connection has a deadline of its own.
            start = time.monotonic()
            try:
                for i in range(len(head)):
                    s.sendall(head[i:i + 1])
                    time.sleep(0.1)
                closed = s.recv(65536) == b""
            except (BrokenPipeError, ConnectionResetError):
                closed = True
            assert closed and time.monotonic() - start < 3.0
    finally:
        p.stop()


def test_a_refused_framing_is_one_log_line_and_no_traceback(upstream):
    """What an operator sees when a client frames its request two ways: `optictx serve` as its
    own process, its log read whole."""
    from serve_peers import ServeProcess

    served = ServeProcess(upstream.openai_url, None, budget=3000, keep_recent=4, vision="auto")
    body = json.dumps({"model": "gpt-4o", "messages": HELLO}).encode()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    cases = [head + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(body) + chunked,
             head + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n" + chunked,
             head + b"Content-Length: %d\r\nContent-Length: 7\r\n\r\n" % len(body) + body,
             head + b"Transfer-Encoding: chunked\r\nContent-Length: 9999\r\n\r\n" + chunked[:6]]
    try:
        for case in cases:
            assert raw_exchange(served.port, case + b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
                                wait=1.0).startswith(b"HTTP/1.1 400")
    finally:
        log = served.stop()
    assert log.count("\n") <= 12, log  # uvicorn's start and stop, and a line per refusal at most
    assert "Traceback" not in log and "Error" not in log, log[-3000:]


def test_a_key_given_twice_goes_as_it_came_and_is_never_stored(proxy, upstream):
    """The proxy and the upstream could read such a body differently, so the proxy reads nothing
    of it: its bytes go as they came, and no conversation keeps a version of it."""
    raw = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "a", "content": "b"}]}'
    r = httpx.post(proxy.url + "/v1/chat/completions", content=raw, headers=JSON)
    assert r.status_code == 200 and "twice" in r.headers["x-optictx-fallback"]
    assert [a.raw for a in upstream.arrivals] == [raw]
    assert proxy.proxy.ledger.conversations(tenant_of({}, personal=True)) == []


def test_an_upstreams_optictx_headers_never_pass_for_the_proxys(proxy, upstream):
    upstream.fail = (429, {"x-optictx-conversation": "forged", "x-optictx-tokens": "1/1000000", "retry-after": "2"})
    body = {"model": "claude-sonnet-4", "max_tokens": 10, "messages": HELLO}
    r = httpx.post(proxy.url + "/v1/messages/count_tokens", json=body)
    assert r.status_code == 429 and r.headers["retry-after"] == "2"  # the upstream's own headers pass
    assert "x-optictx-conversation" not in r.headers and "x-optictx-tokens" not in r.headers


def test_headers_pass_as_a_reverse_proxy_passes_them(proxy, upstream):
    """Hop-by-hop headers, and those a message names in its Connection header, are dropped both
    ways; the upstream's cookies never reach a client; the client gets one Date and one Server."""
    upstream.headers = {"set-cookie": "session=upstream-secret", "connection": "x-upstream-hop",
                        "x-upstream-hop": "private", "date": "Mon, 01 Jan 2001 00:00:00 GMT",
                        "server": "upstream/1.0", "x-upstream-note": "kept"}
    r = _chat(proxy.url, headers={"connection": "keep-alive, x-client-hop", "x-client-hop": "private",
                                  "x-custom": "kept"})
    assert r.status_code == 200
    arrived = upstream.last("/v1/chat/completions").headers
    assert "x-client-hop" not in arrived and arrived.get("x-custom") == "kept"
    assert "set-cookie" not in r.headers and "x-upstream-hop" not in r.headers
    assert r.headers["x-upstream-note"] == "kept"  # the upstream's own headers pass
    assert len(r.headers.get_list("date")) == 1 and len(r.headers.get_list("server")) == 1
    assert "2001" not in r.headers["date"] and r.headers["server"] != "upstream/1.0"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/models"])
def test_an_upstream_redirect_is_an_error_never_relayed(proxy, upstream, path):
    upstream.fail = (307, {"location": "http://evil.example/v1/chat/completions"})
    r = _chat(proxy.url) if path != "/v1/models" else httpx.get(proxy.url + path, timeout=30)
    assert r.status_code == 502 and _is_api_error(r) and "redirect" in r.json()["error"]["message"]
    assert "location" not in r.headers


def test_the_dashboard_cannot_be_framed_by_another_page(proxy):
    r = httpx.get(proxy.url + "/optictx/", timeout=10)
    assert r.status_code == 200 and r.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in r.headers["content-security-policy"]


def test_too_many_headers_are_a_431_not_a_forward(proxy, upstream):
    """Past 100 headers the proxy answers 431 itself; ten thousand (over the HTTP server's own
    bound on a request head) are refused before that, the connection closed. Neither goes up."""
    before = len(upstream.arrivals)
    r = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": HELLO},
                   headers=[(f"x-h{i}", "v") for i in range(150)], timeout=30)
    assert r.status_code == 431 and _is_api_error(r)
    try:
        r = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "gpt-4o", "messages": HELLO},
                       headers=[(f"x-h{i}", "v") for i in range(10_000)], timeout=30)
        assert r.status_code in (400, 431)
    except httpx.TransportError:
        pass  # the server closed the connection on a head past its bound
    assert len(upstream.arrivals) == before, "nothing went upstream"


# -- 7. bounded work ----------------------------------------------------------------------------------

def test_an_upstream_answer_over_the_cap_is_a_502(upstream):
    upstream.reply = "x" * 4000
    p = _serve(upstream, max_answer_bytes=2048)
    try:
        r = _chat(p.url)
        assert r.status_code == 502 and "--max-answer-bytes" in r.json()["error"]["message"]
        streamed = _chat(p.url, stream=True)  # a stream passes through whatever its length
        assert streamed.status_code == 200 and streamed.text.count("x") >= 4000
    finally:
        p.stop()


def test_request_bytes_in_flight_are_capped(upstream):
    p = _serve(upstream, max_inflight_bytes=64 * 1024, max_body_bytes=48 * 1024)
    try:
        slow = socket.create_connection(("127.0.0.1", p.port))
        slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 40000\r\n\r\n" + b" " * 39000)  # held, never finished
        time.sleep(0.5)
        big = [{"role": "user", "content": "y" * 40000}]
        r = _chat(p.url, big)
        assert r.status_code == 503 and r.headers["retry-after"] == "1" and _is_api_error(r)
        slow.close()
        time.sleep(0.5)
        assert _chat(p.url, big).status_code == 200  # given back when the slow one left
    finally:
        p.stop()


def test_nothing_goes_upstream_for_a_client_that_left(upstream):
    p = _serve(upstream, lock_wait=10.0)
    try:
        who = {"authorization": "Bearer k"}
        first = _chat(p.url, headers=who)
        conv = p.proxy.conversations.find(tenant_of(who), first.headers["x-optictx-conversation"])
        more = [*HELLO, {"role": "assistant", "content": "On it."}, {"role": "user", "content": "Go on."}]
        conv.lock.acquire()
        try:
            with pytest.raises(httpx.ReadTimeout):
                _chat(p.url, more, who, timeout=0.5)
            time.sleep(0.3)
        finally:
            conv.lock.release()
        time.sleep(1.0)
        assert len(upstream.arrivals) == 1  # only the first request
    finally:
        p.stop()


def test_an_upstream_call_is_cancelled_when_its_client_leaves(upstream):
    upstream.delay = 3.0
    p = _serve(upstream)
    try:
        t0 = time.monotonic()
        with pytest.raises(httpx.ReadTimeout):
            _chat(p.url, timeout=0.5)
        time.sleep(0.5)
        rows = p.proxy.ledger.requests(tenant_of({}), p.proxy.ledger.conversations(tenant_of({}))[0]["id"])
        assert [r["status"] for r in rows] == [499] and time.monotonic() - t0 < 2.5  # not after the upstream's 3 s
    finally:
        p.stop()


# -- the store under faults: PostgreSQL down, a SQLite file locked by another process ------------------

def test_a_locked_sqlite_store_is_a_bounded_wait_then_an_answer(upstream, tmp_path):
    p = _serve(upstream, store=str(tmp_path / "s"))
    try:
        who = {"authorization": "Bearer k"}
        first = _chat(p.url, headers=who)
        cid = first.headers["x-optictx-conversation"]
        (path,) = [f for f in (tmp_path / "s").rglob(f"*{cid}*") if f.suffix == ".db"]
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")  # another process writing, for long
        try:
            more = [*HELLO, {"role": "assistant", "content": "On it."}, {"role": "user", "content": "Go on."}]
            box: list[httpx.Response] = []
            t = threading.Thread(target=lambda: box.append(_chat(p.url, more, who, timeout=120)))
            t.start()
            time.sleep(0.5)
            t0 = time.monotonic()
            assert _chat(p.url, [{"role": "user", "content": "hi"}], {"authorization": "Bearer b"}).status_code == 200
            assert time.monotonic() - t0 < 2.0
        finally:
            other.execute("ROLLBACK")
            other.close()
        t.join(120)
        assert box and box[0].status_code in (200, 503) and _is_api_error(box[0]) == (box[0].status_code != 200)
    finally:
        p.stop()


def test_postgresql_down_is_a_503_and_never_blocks_the_loop(upstream):
    pgcluster = pytest.importorskip("pgcluster")
    pytest.importorskip("psycopg")
    if pgcluster.binaries() is None:
        pytest.skip("no PostgreSQL server installed (make test installs Debian's postgresql)")
    cluster = pgcluster.Cluster().start()
    p = _serve(upstream, store=cluster.url(cluster.database()))
    try:
        first = _chat(p.url, headers={"authorization": "Bearer k"})
        assert first.status_code == 200
        cid = first.headers["x-optictx-conversation"]
        for strange in ("abc%00", f"{cid}%00", "\u00e9" * 3):
            assert httpx.get(f"{p.url}/optictx/api/conversations/{strange}").status_code == 404
        cluster.stop()
        with ThreadPoolExecutor(2) as pool:
            dash = pool.submit(httpx.get, f"{p.url}/optictx/api/conversations/{cid}",
                               headers={"authorization": "Bearer k"}, timeout=120)
            time.sleep(0.2)
            t0 = time.monotonic()
            models = httpx.get(p.url + "/v1/models", timeout=30)  # no database on its way: never waits for one
            assert models.status_code == 200 and time.monotonic() - t0 < 2.0
            r = dash.result()
        assert r.status_code == 503 and _is_api_error(r)
        assert "127.0.0.1" not in r.text and str(cluster.port) not in r.text
        chat = _chat(p.url, [{"role": "user", "content": "new"}], {"authorization": "Bearer k"}, timeout=120)
        assert chat.status_code == 503 and _is_api_error(chat) and chat.headers["retry-after"]
    finally:
        p.stop()
        cluster.stop()


def test_a_compressed_answer_is_bounded_while_it_inflates(upstream):
    """An upstream that gzips anyway (the proxy asks for identity): a 64 MiB answer of 64 KiB
    compressed is refused at the size bound with memory never near its inflated size; a small
    gzipped answer is relayed decoded, as the client asked for it."""
    import gzip
    import tracemalloc

    p = _serve(upstream, max_answer_bytes=2**20)
    try:
        answer = {"id": "x", "object": "chat.completion", "created": 1, "model": "gpt-4o",
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}
        upstream.headers = {"content-encoding": "gzip"}
        upstream.whole_body = gzip.compress(json.dumps(answer).encode())
        r = _chat(p.url)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "ok"
        upstream.whole_body = gzip.compress(b" " * 64 * 2**20, compresslevel=9)
        tracemalloc.start()
        try:
            r = _chat(p.url)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert r.status_code == 502 and _is_api_error(r) and "over" in r.json()["error"]["message"]
        assert peak < 16 * 2**20, f"{peak / 2**20:.0f} MiB held while refusing a bomb"
    finally:
        upstream.headers = {}
        p.stop()
