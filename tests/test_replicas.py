"""Two `optictx serve` processes on one PostgreSQL database, as behind a load balancer: any
replica may get any request of any conversation, and one may be killed at any moment."""

from __future__ import annotations

import random
import threading
import time
from functools import partial

import pytest
from conftest import needs

pytestmark = [needs("starlette", "serve"), needs("uvicorn", "serve"), needs("httpx", "serve")]

from optictx import Memory, handles  # noqa: E402
from optictx.serve.conversations import tenant_of  # noqa: E402
from optictx.serve.openai_api import OPENAI  # noqa: E402

from serve_peers import Reference, ServeProcess, fresh, newest_key  # noqa: E402

openai = pytest.importorskip("openai")

BUDGET, KEEP, VISION = 3000, 4, "deepseek-ocr"


def replica(upstream_url: str, store: str) -> ServeProcess:
    return ServeProcess(upstream_url, store, budget=BUDGET, keep_recent=KEEP, vision=VISION)


@pytest.fixture
def cluster_db(pg):
    return pg.url(pg.database())


def _body(upstream):
    return upstream.last("/v1/chat/completions").body


def _expected(history, key):
    return fresh(OPENAI, {"model": "deepseek-ocr", "messages": history}, budget=BUDGET, keep=KEEP, vision=VISION,
                 key=key)[0]


def _reference(url):
    """What one replica sends for the only conversation in the store at `url`."""
    from optictx.serve.ledger import Ledger

    return Reference(OPENAI, budget=BUDGET, keep=KEEP, vision=VISION, key=newest_key(Ledger(url)))


def _after(*histories, key):
    """What one replica sends for the last of these requests, after the ones before it."""
    ref = Reference(OPENAI, budget=BUDGET, keep=KEEP, vision=VISION, key=key)
    return [ref.send({"model": "deepseek-ocr", "messages": h})[0] for h in histories][-1]


def _conversations(url: str) -> list[tuple[str, int]]:
    import psycopg

    with psycopg.connect(url.split("?")[0]) as conn:
        return conn.execute("SELECT c.id, count(r.id) FROM optictx_serve_conversations c LEFT JOIN "
                            "optictx_serve_requests r ON r.conversation = c.id WHERE c.tenant = %s GROUP BY c.id",
                            (tenant_of({"authorization": "Bearer key-a"}),)).fetchall()


def test_requests_alternating_between_replicas_send_what_one_replica_would(cluster_db, upstream, sample):
    replicas = [replica(upstream.openai_url, cluster_db) for _ in range(2)]
    try:
        history = list(sample[:30])
        reference = _reference(cluster_db)
        for step in range(8):
            history += sample[30 + 6 * step: 36 + 6 * step]
            replicas[step % 2].client.chat.completions.create(model="deepseek-ocr", messages=history)
            assert _body(upstream) == reference.send({"model": "deepseek-ocr", "messages": history})[0], step
    finally:
        for r in replicas:
            r.stop()
    assert [n for _, n in _conversations(cluster_db)] == [8]  # one memory, grown by both


def test_two_branches_at_once_on_two_replicas_never_mix(cluster_db, upstream, sample):
    replicas = [replica(upstream.openai_url, cluster_db) for _ in range(2)]
    try:
        base = list(sample[:40])
        replicas[0].client.chat.completions.create(model="deepseek-ocr", messages=base)
        for step in range(4):  # each replica continues the same conversation its own way, at once
            branches = [[*base, {"role": "user", "content": f"branch {k} of step {step}: " + "more " * 50}]
                        for k in range(2)]
            failed: list[BaseException] = []
            threads = [threading.Thread(target=_send, args=(r.client, h, failed)) for r, h in zip(replicas, branches)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            assert not failed
            sent = [a.body for a in upstream.arrivals[-2:]]
            # Each branch went as a fork's first request, or as the next call of the memory that
            # held the base (the one that reached it first, at the first step).
            keys = [partial(handles.key_for, c) for c, _ in _conversations(cluster_db)]  # whichever it went to
            for body in sent:
                assert any(body in (_expected(h, k), _after(base, h, key=k)) for h in branches for k in keys), step
            assert sent[0] != sent[1]
    finally:
        for r in replicas:
            r.stop()


def test_a_replica_killed_mid_request_loses_no_acknowledged_turn(cluster_db, upstream, sample):
    rng = random.Random(3)
    upstream.delay = 1.5  # a request is in flight for a while: kills land before, in and after the adds
    a, b = replica(upstream.openai_url, cluster_db), replica(upstream.openai_url, cluster_db)
    history, rest = list(sample[:20]), iter(sample[20:])
    reference = _reference(cluster_db)
    killed = 0
    try:
        for step in range(5):
            history += [next(rest) for _ in range(5)]
            a.client.chat.completions.create(model="deepseek-ocr", messages=history)  # acknowledged
            reference.send({"model": "deepseek-ocr", "messages": history})
            history += [next(rest) for _ in range(5)]
            # The next request goes to `a`, which is killed while it works on it ...
            failed: list[BaseException] = []
            pending = threading.Thread(target=_send, args=(a.client, list(history), failed))
            pending.start()
            time.sleep(rng.uniform(0.02, 1.0))
            a.kill()
            pending.join(timeout=60)
            killed += bool(failed)
            # ... and the client sends it again to `b`, which goes on as one replica would.
            b.client.chat.completions.create(model="deepseek-ocr", messages=history)
            # (`a` may have planned the lost request before dying: the same turns, the same body.)
            assert _body(upstream) == reference.send({"model": "deepseek-ocr", "messages": history})[0], step
            a = replica(upstream.openai_url, cluster_db)
    finally:
        for r in (a, b):
            r.stop()
    assert killed >= 3  # most kills landed while the request was in flight
    ((conversation, requests),) = _conversations(cluster_db)  # one memory, never forked
    assert requests >= 10  # 5 acknowledged on `a`, 5 answered by `b` (and those `a` finished before dying)
    url = cluster_db + f"?memory={conversation}&tenant={tenant_of({'authorization': 'Bearer key-a'})}"
    assert len(Memory.open(url).transcript()) == len(history)


def _send(client, messages, failed) -> None:
    try:
        client.chat.completions.create(model="deepseek-ocr", messages=messages)
    except openai.APIConnectionError as exc:  # killed under it: the client never got an answer
        failed.append(exc)
