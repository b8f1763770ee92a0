"""Turns in PostgreSQL: many named memories in one database, shared by processes on many machines.

    Memory(store="postgresql://user@db.internal/optictx?memory=chat-42&tenant=acme")

`memory` names the memory (default "default") and `tenant` the namespace it lives in (default
""); every other part of the URL is libpq's. The same guarantees as `SQLiteStore`, held to the
same test suite (tests/test_store.py and its neighbours run on both):
- A turn is durable when `append` returns: the one statement that stores it has committed
  (PostgreSQL's default `synchronous_commit=on` has flushed it to the write-ahead log).
- `batch()` is one transaction: its turns commit together or not at all.
- Ids are 0, 1, 2, ... per memory in commit order, across every process and machine: a writer
  takes its memory's row lock (`next_turn`) before it picks an id, so committed turns are a
  gap-free prefix of one total order. Memories never wait on each other.
- Rows carry a CRC-32 of their text, as in SQLite; pages are a cache keyed by render settings.
- Connections come from one pool per database URL in a process. A dropped connection is retried
  where that is safe: a read simply again; an append carries a random nonce stored with its row,
  so an append whose commit may or may not have landed is looked up by that nonce before it is
  tried again, and a turn is never stored twice.
Errors name the database as `postgresql://user@host:port/dbname`, never the password. The
database's URLs, pools, schema and retries are `pgdb.py`; settings, pages and floors are cached
and checked by `base.Derived`, as in SQLite.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import StoreError
from ..turns import Turn
from .base import Derived
from .pgdb import (
    FLOORS_MADE,
    FLOORS_TABLE,
    POOLS,
    SCHEMA_LOCK,
    first_line,
    parse,
    pool,
    pooled,
    psycopg,
    retrying,
    where,
)
from .rowcodec import decode_turns, dump_turn, gap_free, load_turn, seal
from .textindex import holds, like, searchable


def exists(url: str) -> bool:
    """Whether the URL's memory exists."""
    _, tenant, name = parse(url)
    return bool(pooled(url, "SELECT 1 FROM optictx_memories WHERE tenant = %s AND name = %s", (tenant, name),
                        create=True))


def names(url: str) -> list[str]:
    """The memories of the URL's tenant, by name (other tenants' are not listed)."""
    _, tenant, _ = parse(url)
    return [r[0] for r in pooled(url, "SELECT name FROM optictx_memories WHERE tenant = %s ORDER BY name",
                                  (tenant,))]


def delete(url: str) -> bool:
    """Delete the URL's memory (its turns and pages); False when there was none."""
    _, tenant, name = parse(url)
    return bool(pooled(url, "DELETE FROM optictx_memories WHERE tenant = %s AND name = %s RETURNING id",
                        (tenant, name)))


class PostgresStore(Derived):
    """One named memory in a PostgreSQL database. Safe to share between threads.

    `create=False` refuses to start a new memory: one of that name must exist.
    """

    def __init__(self, url: str, *, create: bool = True) -> None:
        self._conninfo, self.tenant, self.name = parse(url)
        self.where = f"{where(url)} memory {self.name!r}"
        self._lock = threading.RLock()
        self._held: psycopg.Connection[Any] | None = None  # the open batch's connection
        self._first_nonce: uuid.UUID | None = None  # the open batch's first append
        self._next = -1  # the id the next append expects (-1: unknown, read on the first append)
        self._tail: Turn | None = None  # the last append, for the since() that follows it
        self._caught_up = False  # whether the full-text index was checked for an older optictx's turns
        self._pool = pool(url, create=create)
        self._closed = False
        try:
            self._id = self._retrying("open the memory", lambda conn: self._memory_id(conn, create))
        except BaseException:
            self.close()
            raise

    def _memory_id(self, conn: psycopg.Connection[Any], create: bool) -> int:
        key = (self.tenant, self.name)
        find = "SELECT id FROM optictx_memories WHERE tenant = %s AND name = %s"
        row = conn.execute(find, key).fetchone()
        if row is None and create:  # opening writes nothing when the memory is there
            conn.execute("INSERT INTO optictx_memories (tenant, name) VALUES (%s, %s) ON CONFLICT DO NOTHING", key)
            row = conn.execute(find, key).fetchone()
        if row is None:
            raise StoreError(f"{self.where}: no such memory")
        return int(row[0])

    # -- connections --------------------------------------------------------------------------

    def _retrying(self, what: str, work: Any) -> Any:
        """`work(conn)`, tried again on a dropped connection; inside a batch once, on its connection
        (a batch's transaction dies with its connection). Failures are StoreErrors."""
        try:
            with self._lock:
                if self._held is not None:
                    return work(self._held)
                return retrying(self._pool, work)
        except psycopg.Error as exc:
            raise StoreError(f"{self.where}: could not {what} ({first_line(exc)})") from None

    def _rows(self, what: str, sql: str, args: Any) -> list[tuple[Any, ...]]:
        return self._retrying(what, lambda conn: conn.execute(sql, args).fetchall())

    # -- turns --------------------------------------------------------------------------------

    def append(self, turn: Turn) -> Turn:
        nonce = uuid.uuid4()
        with self._lock:
            if self._held is not None:
                if self._first_nonce is None:
                    self._first_nonce = nonce
                return self._stored(self._held, turn, nonce)
            tried = False

            def work(conn: psycopg.Connection[Any]) -> Turn:
                nonlocal tried
                if tried:  # the last try broke off, and may have landed: look before trying again
                    with conn.transaction():
                        found = self._locked_lookup(conn, nonce)
                    if found is not None:
                        self._next, self._tail = found.id + 1, found
                        return found
                tried = True
                return self._stored(conn, turn, nonce)

            try:
                return retrying(self._pool, work)  # type: ignore[no-any-return]
            except psycopg.OperationalError:
                raise StoreError(f"{self.where}: could not store a turn (the connection kept failing); whether "
                                 "the last try landed, the next read of this memory tells") from None

    def _stored(self, conn: psycopg.Connection[Any], turn: Turn, nonce: uuid.UUID) -> Turn:
        """Insert `turn` under the next id: one statement that commits by itself (outside a batch).
        It names the id it expects; when another writer took that one, it inserts nothing, and the
        next id is read and tried."""
        try:
            while True:
                if self._next < 0:  # the first append of this handle: the memory's next id
                    self._next = self._next_id(conn)
                expect = self._next
                stored = turn.model_copy(update={"id": expect})
                body = dump_turn(stored)
                stored = load_turn(body)  # never commit what a later open could not read back
                row = conn.execute(
                    "WITH n AS (UPDATE optictx_memories SET next_turn = next_turn + 1 "
                    "WHERE id = %s AND next_turn = %s RETURNING id), "
                    "t AS (INSERT INTO optictx_turns (memory, id, nonce, body) SELECT n.id, %s, %s, %s FROM n "
                    "RETURNING memory, id) "
                    "INSERT INTO optictx_text (memory, id, text) SELECT memory, id, %s FROM t RETURNING id",
                    (self._id, expect, expect, nonce, seal(body), searchable(stored))).fetchone()
                if row is not None:
                    self._next, self._tail = expect + 1, stored
                    return stored
                self._next = self._next_id(conn)
        except (ValueError, RecursionError) as exc:
            raise StoreError(f"{self.where}: the turn would not read back ({exc}); nothing stored") from None
        except psycopg.OperationalError:
            raise
        except psycopg.Error as exc:
            raise StoreError(f"{self.where}: could not store a turn ({first_line(exc)})") from None

    def _next_id(self, conn: psycopg.Connection[Any]) -> int:
        now = conn.execute("SELECT next_turn FROM optictx_memories WHERE id = %s", (self._id,)).fetchone()
        if now is None:
            raise StoreError(f"{self.where}: the memory was deleted")
        return int(now[0])

    def _locked_lookup(self, conn: psycopg.Connection[Any], nonce: uuid.UUID) -> Turn | None:
        """The turn stored under `nonce`, or None, asked under the memory's row lock (inside a
        transaction): a dead connection's statement that still holds it ends first."""
        conn.execute("SELECT 1 FROM optictx_memories WHERE id = %s FOR UPDATE", (self._id,))
        rows = conn.execute("SELECT id, body FROM optictx_turns WHERE memory = %s AND nonce = %s",
                            (self._id, nonce)).fetchall()
        return decode_turns(rows, self.where)[0] if rows else None

    def _committed(self, nonce: uuid.UUID) -> bool:
        def work(conn: psycopg.Connection[Any]) -> bool:
            with conn.transaction():
                return self._locked_lookup(conn, nonce) is not None

        return self._retrying("look up a turn", work)

    def since(self, after: int) -> list[Turn]:
        with self._lock:
            tail, self._tail = self._tail, None
            if tail is not None and tail.id == after + 1 == self._next - 1:
                # Just appended right after what the caller has: the read a query would make at that
                # commit. Turns other writers commit later come with the next call.
                return [tail]
            rows = self._rows("read turns", "SELECT id, body FROM optictx_turns WHERE memory = %s AND id > %s "
                              "ORDER BY id", (self._id, after))
            turns = gap_free(decode_turns(rows, self.where), after, self.where)
            self._next = max(self._next, after + 1 + len(turns))
            return turns

    def get(self, ids: Iterable[int]) -> dict[int, Turn]:
        rows = self._rows("read turns", "SELECT id, body FROM optictx_turns WHERE memory = %s AND id = ANY(%s)",
                          (self._id, list(ids)))
        return {t.id: t for t in decode_turns(rows, self.where)}

    def find(self, terms: Sequence[str], limit: int) -> list[Turn]:
        """The newest `limit` turns holding every term (`textindex.py`), newest first."""
        if not self._caught_up:  # once per handle: every optictx since writes a turn's text with it
            self._catch_up()
            self._caught_up = True
        rows = self._rows("search", "SELECT t.id, t.body FROM optictx_text x JOIN optictx_turns t "
                          "ON t.memory = x.memory AND t.id = x.id WHERE x.memory = %s AND x.text LIKE ALL(%s) "
                          "ORDER BY x.id DESC LIMIT %s", (self._id, [like(t) for t in terms], limit))
        return [t for t in decode_turns(rows, self.where) if holds(t, terms)]

    def _catch_up(self) -> None:
        """Index the turns an older optictx stored without their text (an anti-join over the
        memory's turns: once per handle, not per search)."""
        rows = self._rows("search", "SELECT t.id, t.body FROM optictx_turns t LEFT JOIN optictx_text x "
                          "ON x.memory = t.memory AND x.id = t.id WHERE t.memory = %s AND x.id IS NULL", (self._id,))
        if rows:
            texts = [(self._id, t.id, searchable(t)) for t in decode_turns(rows, self.where)]
            self._retrying("index turns", lambda conn: conn.cursor().executemany(
                "INSERT INTO optictx_text (memory, id, text) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING", texts))

    @contextmanager
    def batch(self) -> Iterator[None]:
        """One transaction on one connection, holding the memory's row lock from the start: other
        writers of this memory wait, and what is read inside is the latest committed state."""
        with self._lock:
            if self._held is not None:
                yield
                return
            try:
                conn = self._pool.getconn()
            except Exception as exc:  # PoolTimeout: no connection to be had
                raise StoreError(f"{self.where}: could not start a batch ({first_line(exc)})") from None
            finished = committed = False
            try:
                with conn.transaction():
                    row = conn.execute("SELECT next_turn FROM optictx_memories WHERE id = %s FOR UPDATE",
                                       (self._id,)).fetchone()
                    if row is None:
                        raise StoreError(f"{self.where}: the memory was deleted")
                    self._next, self._tail = int(row[0]), None
                    self._held, self._first_nonce = conn, None
                    try:
                        yield
                    finally:
                        self._held = None
                    finished = True
                committed = True
            except psycopg.OperationalError as exc:
                # The commit may have landed before the connection broke: the first turn tells.
                committed = finished and self._first_nonce is not None and self._committed(self._first_nonce)
                if not committed:
                    raise StoreError(f"{self.where}: the batch was not committed ({first_line(exc)})") from None
            except psycopg.Error as exc:
                raise StoreError(f"{self.where}: the batch was not committed ({first_line(exc)})") from None
            finally:
                if not committed:  # what the batch appended is gone: the next append reads the next id
                    self._tail, self._next = None, -1
                self._pool.putconn(conn)

    # -- the rows under `Derived`: settings, pages, floors -------------------------------------

    def _meta_row(self) -> Any:
        rows = self._rows("read settings", "SELECT meta FROM optictx_memories WHERE id = %s", (self._id,))
        return rows[0][0] if rows else None

    def _put_meta(self, body: str) -> None:
        self._retrying("store settings", lambda conn: conn.execute(
            "UPDATE optictx_memories SET meta = %s WHERE id = %s", (body, self._id)))

    def _page_rows(self, key: str) -> list[tuple[Any, ...]]:
        stale = ("DELETE FROM optictx_pages WHERE memory = %s AND key <> %s", (self._id, key))
        return self._derived("read pages", stale, ("SELECT idx, body FROM optictx_pages WHERE memory = %s AND key = %s "
                                                   "ORDER BY idx", (self._id, key)))

    def _derived(self, what: str, *statements: tuple[str, tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The last statement's rows, all of them run in a savepoint (inside a batch, a failure
        here, no table yet say, spoils nothing else)."""
        def work(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            with conn.transaction():
                for sql, args in statements[:-1]:
                    conn.execute(sql, args)
                return conn.execute(*statements[-1]).fetchall()

        return self._retrying(what, work)  # type: ignore[no-any-return]

    def _put_pages(self, key: str, rows: list[tuple[int, str]]) -> None:
        def work(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany("INSERT INTO optictx_pages (memory, key, idx, body) VALUES (%s, %s, %s, %s) "
                                "ON CONFLICT DO NOTHING", [(self._id, key, idx, body) for idx, body in rows])

        self._retrying("store pages", work)

    def _floor_rows(self, gate: str) -> list[tuple[Any, ...]]:
        return self._derived("read floors", ("SELECT page, body FROM optictx_floors WHERE memory = %s AND gate = %s",
                                             (self._id, gate)))

    def _put_floors(self, gate: str, rows: list[tuple[str, str]]) -> None:
        def work(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction(), conn.cursor() as cur:
                if self._conninfo not in FLOORS_MADE:  # once per process and database
                    cur.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
                    cur.execute(FLOORS_TABLE)
                cur.executemany("INSERT INTO optictx_floors (memory, gate, page, body) VALUES (%s, %s, %s, %s) "
                                "ON CONFLICT (memory, gate, page) DO UPDATE SET body = excluded.body",
                                [(self._id, gate, page, body) for page, body in rows])

        try:
            self._retrying("store floors", work)
        except StoreError:
            FLOORS_MADE.discard(self._conninfo)  # perhaps no table (a batch rolled it back): make it again
            raise
        FLOORS_MADE.add(self._conninfo)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                POOLS.give(self._conninfo)  # the last store of a database closes its pool
