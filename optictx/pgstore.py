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
Errors name the database as `postgresql://user@host:port/dbname`, never the password.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .errors import StoreError, need
from .rowcodec import decode_meta, decode_turns, dump_turn, gap_free, intact_floors, intact_pages, load_turn, seal
from .turns import Turn

psycopg = need("psycopg", "postgres")
_pool_module = need("psycopg_pool", "postgres")
ConnectionPool, PoolTimeout = _pool_module.ConnectionPool, _pool_module.PoolTimeout

SCHEMA_VERSION = 1
MAX_NAME = 200
POOL_SIZE = 8  # connections per database URL and process; each is held only for one statement or batch
_CONNECT_TIMEOUT_S = 10
# A writer waits this long for another's row lock (a stopped replica's, say), then fails: a
# bounded wait, never a thread held for good.
_LOCK_TIMEOUT_MS = 30_000
_RETRIES = 4  # attempts on a dropped connection (backing off 0.05, 0.1, 0.2 s)
# How long a caller waits for a pooled connection: the database down, or every connection busy
# for this long, is an error (the proxy answers 503, Retry-After), never a thread held for good.
_POOL_WAIT_S = 10.0
_SCHEMA_LOCK = 0x6F707478  # advisory lock "optx": processes creating the tables at once agree

_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("CREATE TABLE optictx_memories (id BIGSERIAL PRIMARY KEY, tenant TEXT NOT NULL, name TEXT NOT NULL, "
        "next_turn BIGINT NOT NULL DEFAULT 0, meta TEXT, created TIMESTAMPTZ NOT NULL DEFAULT now(), "
        "UNIQUE (tenant, name))",
        "CREATE TABLE optictx_turns (memory BIGINT NOT NULL REFERENCES optictx_memories (id) ON DELETE CASCADE, "
        "id BIGINT NOT NULL, nonce UUID NOT NULL, body TEXT NOT NULL, PRIMARY KEY (memory, id))",
        "CREATE UNIQUE INDEX optictx_turns_nonce ON optictx_turns (memory, nonce)",
        "CREATE TABLE optictx_pages (memory BIGINT NOT NULL REFERENCES optictx_memories (id) ON DELETE CASCADE, "
        "key TEXT NOT NULL, idx INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (memory, key, idx))"),
}
_TABLES = {"optictx_memories", "optictx_turns", "optictx_pages"}
# The legibility gate's findings: a cache beside the pages, made on its first write (under the
# schema lock). Not a schema step: an older optictx on the same database goes on as before.
_FLOORS_TABLE = ("CREATE TABLE IF NOT EXISTS optictx_floors (memory BIGINT NOT NULL REFERENCES optictx_memories (id) "
                 "ON DELETE CASCADE, gate TEXT NOT NULL, page TEXT NOT NULL, body TEXT NOT NULL, "
                 "PRIMARY KEY (memory, gate, page))")
_FLOORS_MADE: set[str] = set()  # databases this process has seen the floors table in


def parse(url: str) -> tuple[str, str, str]:
    """(libpq URL, tenant, memory name) of a store URL; a StoreError when the names are malformed."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in query if k in ("memory", "tenant")}
    rest = [(k, v) for k, v in query if k not in ("memory", "tenant")]
    name, tenant = ours.get("memory", "default"), ours.get("tenant", "")
    for field, value in (("memory", name), ("tenant", tenant)):
        if len(value) > MAX_NAME or not value.isprintable() or (field == "memory" and not value):
            raise StoreError(f"{where(url)}: {field}= must be 1 to {MAX_NAME} printable characters")
    return urlunsplit(parts._replace(query=urlencode(rest))), tenant, name


def where(url: str) -> str:
    """The database as errors name it: user, host, port and database, no password."""
    try:
        parts = urlsplit(url)
        user = f"{parts.username}@" if parts.username else ""
        port = f":{parts.port}" if parts.port else ""
        return f"postgresql://{user}{parts.hostname or ''}{port}{parts.path}"
    except ValueError:
        return "postgresql://(unreadable URL)"


class _Pools:
    """One connection pool per database URL in this process, shared by its stores, closed with the last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: dict[str, tuple[ConnectionPool, int]] = {}

    def take(self, url: str, create: bool) -> ConnectionPool:
        """The pool for `url`'s database; the first one in a process checks (or creates) the schema
        on a direct connection, so a refused connection is a StoreError at once, not a pool timeout."""
        conninfo = parse(url)[0]
        with self._lock:
            pool, users = self._pools.get(conninfo, (None, 0))
            if pool is None:
                with connect(url) as conn:
                    try:
                        ensure_schema(conn, url, create)
                    except psycopg.Error as exc:
                        raise StoreError(f"{where(url)}: cannot open ({_first_line(exc)})") from None
                settings = {"autocommit": True, "connect_timeout": _CONNECT_TIMEOUT_S,
                            "options": f"-c lock_timeout={_LOCK_TIMEOUT_MS}"}
                pool = ConnectionPool(conninfo, min_size=1, max_size=POOL_SIZE, open=True, name="optictx",
                                      timeout=_POOL_WAIT_S, kwargs=settings)
            self._pools[conninfo] = (pool, users + 1)
            return pool

    def give(self, conninfo: str) -> None:
        with self._lock:
            pool, users = self._pools[conninfo]
            if users > 1:
                self._pools[conninfo] = (pool, users - 1)
                return
            del self._pools[conninfo]
        pool.close()


_POOLS = _Pools()


def pool(url: str, *, create: bool = True) -> ConnectionPool:
    """This process's connection pool for `url`'s database (the schema checked); `release(url)` when done."""
    return _POOLS.take(url, create)


def release(url: str) -> None:
    _POOLS.give(parse(url)[0])


def _pooled(url: str, sql: str, args: tuple[Any, ...], *, create: bool = False) -> list[tuple[Any, ...]]:
    """One statement on this process's pool for `url` (taken and given back): the module-level
    questions a proxy asks often, without a connection of their own each time."""
    shared = pool(url, create=create)
    try:
        with shared.connection() as conn:
            cur = conn.execute(sql, args)
            return cur.fetchall() if cur.description else []
    except psycopg.Error as exc:
        raise StoreError(f"{where(url)}: {_first_line(exc)}") from None
    finally:
        release(url)


def exists(url: str) -> bool:
    """Whether the URL's memory exists."""
    _, tenant, name = parse(url)
    return bool(_pooled(url, "SELECT 1 FROM optictx_memories WHERE tenant = %s AND name = %s", (tenant, name),
                        create=True))


def connect(url: str) -> psycopg.Connection[Any]:
    """One direct connection (autocommit), a StoreError naming the database when refused."""
    try:
        return psycopg.connect(parse(url)[0], autocommit=True, connect_timeout=_CONNECT_TIMEOUT_S)
    except psycopg.Error as exc:
        raise StoreError(f"{where(url)}: cannot connect ({_first_line(exc)})") from None


def ensure_schema(conn: psycopg.Connection[Any], url: str, create: bool) -> None:
    """Check the database's optictx schema, creating or migrating it forward where allowed."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        tables = {r[0] for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE 'optictx%'")}
        if "optictx_schema" not in tables:
            if tables:
                raise StoreError(f"{where(url)}: damaged optictx database (tables without optictx_schema)")
            if not create:
                raise StoreError(f"{where(url)}: no optictx memories in this database")
            conn.execute("CREATE TABLE optictx_schema (version INTEGER NOT NULL)")
            conn.execute("INSERT INTO optictx_schema VALUES (0)")
        row = conn.execute("SELECT max(version) FROM optictx_schema").fetchone()
        version = row[0] if row and row[0] is not None else -1
        if version > SCHEMA_VERSION:
            raise StoreError(f"{where(url)}: written by a newer optictx (schema {version}, this one reads up to "
                             f"{SCHEMA_VERSION}); upgrade optictx")
        if version < 0:
            raise StoreError(f"{where(url)}: damaged optictx database (no schema version)")
        if version > 0 and _TABLES - tables:
            raise StoreError(f"{where(url)}: damaged optictx database (no {', '.join(sorted(_TABLES - tables))} "
                             "table)")
        for step in range(version + 1, SCHEMA_VERSION + 1):
            for sql in _MIGRATIONS[step]:
                conn.execute(sql)
        if version != SCHEMA_VERSION:
            conn.execute("UPDATE optictx_schema SET version = %s", (SCHEMA_VERSION,))


def names(url: str) -> list[str]:
    """The memories of the URL's tenant, by name (other tenants' are not listed)."""
    _, tenant, _ = parse(url)
    return [r[0] for r in _pooled(url, "SELECT name FROM optictx_memories WHERE tenant = %s ORDER BY name",
                                  (tenant,))]


def delete(url: str) -> bool:
    """Delete the URL's memory (its turns and pages); False when there was none."""
    _, tenant, name = parse(url)
    return bool(_pooled(url, "DELETE FROM optictx_memories WHERE tenant = %s AND name = %s RETURNING id",
                        (tenant, name)))


def retrying(shared: ConnectionPool, work: Any, *, attempts: int = _RETRIES) -> Any:
    """`work(conn)` on a pooled connection, tried again (with a short backoff) when the connection
    drops; the last OperationalError propagates. Only for work that is safe to repeat."""
    for attempt in range(attempts):
        try:
            with shared.connection() as conn:
                return work(conn)
        except psycopg.OperationalError as exc:
            if attempt == attempts - 1 or isinstance(exc, PoolTimeout):  # the pool waited already
                raise
            shared.check()  # drop the pool's other dead connections before trying again
            time.sleep(0.05 * 2**attempt)
    return None  # attempts < 1: nothing tried


class PostgresStore:
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
            raise StoreError(f"{self.where}: could not {what} ({_first_line(exc)})") from None

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
            for attempt in range(_RETRIES):
                try:
                    with self._pool.connection() as conn:
                        if attempt:  # after a broken connection the last try may have landed: look first
                            with conn.transaction():
                                found = self._locked_lookup(conn, nonce)
                            if found is not None:
                                self._next, self._tail = found.id + 1, found
                                return found
                        return self._stored(conn, turn, nonce)
                except psycopg.OperationalError:
                    self._pool.check()
                    time.sleep(0.05 * 2**attempt)
            raise StoreError(f"{self.where}: could not store a turn (the connection kept failing); whether the "
                             "last try landed, the next read of this memory tells")

    def _stored(self, conn: psycopg.Connection[Any], turn: Turn, nonce: uuid.UUID) -> Turn:
        """Insert `turn` under the next id: one statement that commits by itself (outside a batch).
        It names the id it expects; when another writer took that one, it inserts nothing, and the
        next id is read and tried."""
        try:
            while True:
                expect = self._next
                stored = turn.model_copy(update={"id": expect})
                body = dump_turn(stored)
                stored = load_turn(body)  # never commit what a later open could not read back
                row = conn.execute(
                    "WITH n AS (UPDATE optictx_memories SET next_turn = next_turn + 1 "
                    "WHERE id = %s AND next_turn = %s RETURNING id) "
                    "INSERT INTO optictx_turns (memory, id, nonce, body) SELECT n.id, %s, %s, %s FROM n RETURNING id",
                    (self._id, expect, expect, nonce, seal(body))).fetchone()
                if row is not None:
                    self._next, self._tail = expect + 1, stored
                    return stored
                now = conn.execute("SELECT next_turn FROM optictx_memories WHERE id = %s", (self._id,)).fetchone()
                if now is None:
                    raise StoreError(f"{self.where}: the memory was deleted")
                self._next = int(now[0])
        except (ValueError, RecursionError) as exc:
            raise StoreError(f"{self.where}: the turn would not read back ({exc}); nothing stored") from None
        except psycopg.OperationalError:
            raise
        except psycopg.Error as exc:
            raise StoreError(f"{self.where}: could not store a turn ({_first_line(exc)})") from None

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
                raise StoreError(f"{self.where}: could not start a batch ({_first_line(exc)})") from None
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
                    raise StoreError(f"{self.where}: the batch was not committed ({_first_line(exc)})") from None
            except psycopg.Error as exc:
                raise StoreError(f"{self.where}: the batch was not committed ({_first_line(exc)})") from None
            finally:
                if not committed:  # what the batch appended is gone: the next append reads the next id
                    self._tail, self._next = None, -1
                self._pool.putconn(conn)

    # -- settings and pages -------------------------------------------------------------------

    def get_meta(self) -> dict[str, Any] | None:
        rows = self._rows("read settings", "SELECT meta FROM optictx_memories WHERE id = %s", (self._id,))
        if not rows or rows[0][0] is None:
            return None
        try:
            return decode_meta(rows[0][0])
        except (ValueError, TypeError, RecursionError, StoreError) as exc:
            raise StoreError(f"{self.where}: corrupt settings ({type(exc).__name__}: {exc})"[:500]) from None

    def set_meta(self, meta: dict[str, Any]) -> None:
        try:
            if self.get_meta() == meta:
                return
        except StoreError:
            pass  # damaged settings are replaced by the ones given
        body = seal(json.dumps(meta))
        self._retrying("store settings", lambda conn: conn.execute(
            "UPDATE optictx_memories SET meta = %s WHERE id = %s", (body, self._id)))

    def load_pages(self, key: str) -> list[str]:
        def work(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            with conn.transaction():  # a savepoint inside a batch: a failure here spoils nothing else
                conn.execute("DELETE FROM optictx_pages WHERE memory = %s AND key <> %s", (self._id, key))
                return conn.execute("SELECT idx, body FROM optictx_pages WHERE memory = %s AND key = %s ORDER BY idx",
                                    (self._id, key)).fetchall()

        try:
            return intact_pages(self._retrying("read pages", work))
        except StoreError:
            return []  # derived data: the caller re-packs from the turns

    def save_pages(self, key: str, first: int, bodies: Iterable[str]) -> None:
        rows = [(self._id, key, first + n, seal(b)) for n, b in enumerate(bodies)]

        def work(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany("INSERT INTO optictx_pages (memory, key, idx, body) VALUES (%s, %s, %s, %s) "
                                "ON CONFLICT DO NOTHING", rows)

        with contextlib.suppress(StoreError):  # a cache write: the pages are re-packed on the next open
            self._retrying("store pages", work)

    def load_floors(self, gate: str) -> dict[str, str]:
        def work(conn: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            with conn.transaction():  # a savepoint inside a batch: no table yet spoils nothing else
                return conn.execute("SELECT page, body FROM optictx_floors WHERE memory = %s AND gate = %s",
                                    (self._id, gate)).fetchall()

        try:
            return intact_floors(self._retrying("read floors", work))
        except StoreError:
            return {}  # derived data: the gate reads the pages again

    def save_floors(self, gate: str, floors: Mapping[str, str]) -> None:
        rows = [(self._id, gate, page, seal(body)) for page, body in floors.items()]

        def work(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction(), conn.cursor() as cur:
                if self._conninfo not in _FLOORS_MADE:  # once per process and database
                    cur.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                    cur.execute(_FLOORS_TABLE)
                cur.executemany("INSERT INTO optictx_floors (memory, gate, page, body) VALUES (%s, %s, %s, %s) "
                                "ON CONFLICT (memory, gate, page) DO UPDATE SET body = excluded.body", rows)

        try:
            self._retrying("store floors", work)
        except StoreError:  # a cache write: the pages are read again on the next open
            _FLOORS_MADE.discard(self._conninfo)  # perhaps no table (a batch rolled it back): make it again
        else:
            _FLOORS_MADE.add(self._conninfo)

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                _POOLS.give(self._conninfo)  # the last store of a database closes its pool


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
