"""What only a PostgreSQL store has: named memories under tenants in one database, a schema to
check, connections that drop and commits whose answer is lost. The store contract itself
(durability, order, pages, batches) runs on both backends in test_store.py, test_concurrency.py
and test_durability.py."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from optictx import Budget, Memory, RenderConfig, StoreError


@pytest.fixture
def db(pg):
    """A fresh database of the session's cluster: (cluster, its name)."""
    return pg, pg.database()


def _sql(pg, database: str, sql: str, *args) -> list:
    import psycopg

    with psycopg.connect(pg.url(database), autocommit=True) as conn:
        cur = conn.execute(sql, args or None)
        return cur.fetchall() if cur.description else []


def _filled(url: str, n: int = 60) -> Memory:
    mem = Memory(store=url, budget=Budget(tokens=3000), keep_recent=3)
    with mem.batch():
        for i in range(n):
            mem.add({"role": "user" if i % 2 else "assistant", "content": f"turn {i} order {1_000_000 + i} " * 40})
    return mem


def test_memories_are_named_listed_and_deleted_per_tenant(db):
    from optictx.store import postgres

    pg, name = db
    for tenant in ("acme", "globex"):
        for memory in ("chat-1", "chat-2"):
            with Memory(store=pg.url(name, tenant=tenant, memory=memory)) as mem:
                mem.add({"role": "user", "content": f"{tenant} {memory}"})
    assert postgres.names(pg.url(name, tenant="acme")) == ["chat-1", "chat-2"]
    # One name under two tenants: two memories, neither visible from the other.
    assert Memory.open(pg.url(name, tenant="globex", memory="chat-1")).transcript()[0].content == "globex chat-1"
    with pytest.raises(StoreError, match="no such memory"):
        Memory.open(pg.url(name, tenant="initech", memory="chat-1"))
    assert postgres.delete(pg.url(name, tenant="acme", memory="chat-1"))
    assert not postgres.delete(pg.url(name, tenant="acme", memory="chat-1"))
    assert postgres.names(pg.url(name, tenant="acme")) == ["chat-2"]
    assert postgres.names(pg.url(name, tenant="globex")) == ["chat-1", "chat-2"]
    assert _sql(pg, name, "SELECT count(*) FROM optictx_turns")[0][0] == 3  # the deleted one's turns are gone


def test_bad_names_are_refused_naming_the_field(pg):
    with pytest.raises(StoreError, match="memory="):
        Memory(store=pg.url(memory=""))
    with pytest.raises(StoreError, match="tenant="):
        Memory(store=pg.url(tenant="x" * 201))


def test_a_newer_schema_is_refused_naming_the_database_but_never_the_password(db):
    pg, name = db
    Memory(store=pg.url(name)).close()
    _sql(pg, name, "UPDATE optictx_schema SET version = 99")
    url = pg.url(name).replace("optictx@", "optictx:s3cret-pw@")  # trust auth: the password is not checked
    with pytest.raises(StoreError) as err:
        Memory.open(url)
    assert f"127.0.0.1:{pg.port}/{name}" in str(err.value) and "newer optictx" in str(err.value)
    assert "s3cret" not in str(err.value)


def test_a_missing_table_or_an_empty_database_is_a_clear_store_error(pg):
    empty = pg.database()
    with pytest.raises(StoreError, match="no optictx memories in this database"):
        Memory.open(pg.url(empty))
    damaged = pg.database()
    Memory(store=pg.url(damaged)).close()
    _sql(pg, damaged, "DROP TABLE optictx_pages")
    with pytest.raises(StoreError, match=f"{damaged}.*no optictx_pages table"):
        Memory(store=pg.url(damaged))


def test_a_table_dropped_under_an_open_memory_fails_its_adds_clearly(db):
    pg, name = db
    mem = _filled(pg.url(name), n=4)
    _sql(pg, name, "DROP TABLE optictx_turns")
    with pytest.raises(StoreError, match=f"{name}.*could not store a turn"):
        mem.add({"role": "user", "content": "lost?"})


def test_a_refused_connection_is_a_store_error_at_once(pg):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket closes
    start = time.monotonic()
    with pytest.raises(StoreError, match=f"postgresql://u@127.0.0.1:{port}/x.*cannot connect"):
        Memory(store=f"postgresql://u:pw@127.0.0.1:{port}/x")
    assert time.monotonic() - start < 5


def test_damaged_rows_are_store_errors_and_damaged_pages_are_packed_again(db):
    pg, name = db
    url = pg.url(name)
    digests = [p.digest for p in _filled(url).pages]
    _sql(pg, name, "UPDATE optictx_pages SET body = 'not json' WHERE idx = 0")
    assert [p.digest for p in Memory.open(url).pages] == digests
    with Memory.open(url, render=RenderConfig(columns=1)):
        pass
    assert _sql(pg, name, "SELECT count(DISTINCT key) FROM optictx_pages")[0][0] == 1  # the old settings' are gone
    _sql(pg, name, "UPDATE optictx_turns SET body = overlay(body placing 'X' from 30 for 1) WHERE id = 5")
    with pytest.raises(StoreError, match=f"{name}.*checksum mismatch"):
        Memory.open(url)
    _sql(pg, name, "DELETE FROM optictx_turns WHERE id = 5")
    with pytest.raises(StoreError, match=f"{name}.*turn 5 is missing"):
        Memory.open(url)


def test_a_reopen_reads_its_settings_once(db, monkeypatch):
    """With the pool open, a reopen reads the settings once and writes nothing unchanged;
    changed ones are written (tests/test_store.py, both backends)."""
    import psycopg

    pg, name = db
    url = pg.url(name)
    _filled(url, 4).close()
    keep = Memory(store=url)  # holds the pool, as a proxy's other conversations do
    statements: list[str] = []
    execute = psycopg.Cursor.execute

    def counted(cur, query, *args, **kwargs):
        statements.append(str(query))
        return execute(cur, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    with Memory.open(url):
        pass
    assert sum("SELECT meta" in q for q in statements) == 1, statements
    assert not any(q.startswith("UPDATE optictx_memories") for q in statements)  # nothing to write
    keep.close()


def test_connections_killed_by_the_server_are_replaced_without_losing_or_repeating_a_turn(db):
    pg, name = db
    mem = _filled(pg.url(name), n=10)
    for round_ in range(3):
        killed = _sql(pg, name, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                "WHERE datname = %s AND pid <> pg_backend_pid()", name)
        assert killed
        mem.add({"role": "user", "content": f"after kill {round_}"})
    assert [t.content for t in Memory.open(pg.url(name)).transcript()[10:]] == [f"after kill {i}" for i in range(3)]


class _Relay:
    """A TCP relay to the cluster that, when armed, passes on the client's message holding
    `self.cut_at` (an add's INSERT commits by itself; a batch's COMMIT) and then cuts the
    connection before the answer comes back: the commit lands, the client cannot know. Bounded:
    it stops with `close()`."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.cut_at = b"COMMIT\x00"
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.armed = threading.Event()
        self.cuts = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            server = socket.create_connection(("127.0.0.1", self.target))
            cut = threading.Event()
            threading.Thread(target=self._up, args=(client, server, cut), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, cut), daemon=True).start()

    def _up(self, client, server, cut) -> None:
        try:
            while data := client.recv(65536):
                if self.cut_at in data and self.armed.is_set():
                    self.armed.clear()
                    cut.set()  # the server's answer is dropped from here on
                    server.sendall(data)
                    time.sleep(0.3)  # the server commits and answers meanwhile
                    self.cuts += 1
                    break
                server.sendall(data)
        except OSError:
            pass
        for s in (client, server):
            s.close()

    def _down(self, server, client, cut) -> None:
        try:
            while (data := server.recv(65536)) and not cut.is_set():
                client.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.listener.close()


@pytest.mark.parametrize("grouped", [False, True])
def test_a_commit_whose_answer_is_lost_is_resolved_not_repeated(db, grouped):
    pg, name = db
    relay = _Relay(pg.port)
    try:
        url = pg.url(name, memory="relayed").replace(f":{pg.port}/", f":{relay.port}/")
        mem = Memory(store=url, keep_recent=2)
        mem.add({"role": "user", "content": "first"})
        relay.cut_at = b"COMMIT\x00" if grouped else b"INSERT INTO optictx_turns"
        relay.armed.set()
        if grouped:
            with mem.batch():
                mem.add({"role": "user", "content": "in batch 1"})
                mem.add({"role": "user", "content": "in batch 2"})
        else:
            mem.add({"role": "user", "content": "once"})
        assert relay.cuts == 1
        mem.add({"role": "user", "content": "last"})
        want = ["first", "in batch 1", "in batch 2", "last"] if grouped else ["first", "once", "last"]
        assert [t.content for t in mem.transcript()] == want
        mem.close()
    finally:
        relay.close()
    assert [t.content for t in Memory.open(pg.url(name, memory="relayed")).transcript()] == want


@pytest.mark.parametrize("where", ["sqlite", "postgres"])
def test_the_proxy_ledger_answers_the_same_on_both_engines(pg, tmp_path, where):
    from optictx.serve.ledger import Ledger, Sent

    ledger = Ledger(tmp_path / "serve" if where == "sqlite" else pg.url(pg.database()))
    try:
        ledger.new_conversation("c1", "t1", "chat")
        ledger.new_conversation("c1", "t1", "chat")  # a replica's retry: no second row, no error
        ledger.new_conversation("c2", "t2", None)
        ledger.extend("c1", [b"d1", b"d2", b"d3"], 0)
        ledger.extend("c1", [b"d1", b"d2", b"d3"], 1)  # again from turn 1 (a killed replica's leftovers)
        assert ledger.longest([b"x", b"d1", b"d2"]) == ("c1", 2) and ledger.longest([b"nope"]) is None
        for status in (200, 429):
            ledger.record(Sent("c1", "t1", "openai", "gpt-4o", "openai:gpt-4o", 3, 900, 300, False,
                               {"small": 2, "gone": 1}, status))
        (row,) = ledger.conversations("t1")
        assert (row["id"], row["name"], row["requests"], row["original"], row["sent"]) == ("c1", "chat", 2, 1800, 600)
        assert [r["status"] for r in ledger.requests("t1", "c1")] == [200, 429]
        assert ledger.requests("t1", "c1")[0]["tiers"] == {"small": 2, "gone": 1}
        assert ledger.requests("t2", "c1") == [] and ledger.owner("c2") == "t2"
        assert [c["id"] for c in ledger.conversations("t2")] == ["c2"]  # no requests yet: still listed
        ledger.forget("c1")
        assert ledger.longest([b"d3"]) is None
    finally:
        ledger.close()
