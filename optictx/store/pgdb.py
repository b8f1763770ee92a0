"""A PostgreSQL database of optictx memories: store URLs, this process's connection pools, the
schema and its migrations, retries on a dropped connection. `postgres.py` keeps the memories in
it; the proxy's ledger shares its pools and retries. Errors name the database as `postgresql://user@host:port/dbname`,
never the password."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import StoreError, need

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
RETRIES = 4  # attempts on a dropped connection (backing off 0.05, 0.1, 0.2 s)
# How long a caller waits for a pooled connection: the database down, or every connection busy
# for this long, is an error (the proxy answers 503, Retry-After), never a thread held for good.
_POOL_WAIT_S = 10.0
SCHEMA_LOCK = 0x6F707478  # advisory lock "optx": processes creating the tables at once agree

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
FLOORS_TABLE = ("CREATE TABLE IF NOT EXISTS optictx_floors (memory BIGINT NOT NULL REFERENCES optictx_memories (id) "
                 "ON DELETE CASCADE, gate TEXT NOT NULL, page TEXT NOT NULL, body TEXT NOT NULL, "
                 "PRIMARY KEY (memory, gate, page))")
FLOORS_MADE: set[str] = set()  # databases this process has seen the floors table in
# The full-text index (textindex.py): each turn's lowered text, written in the statement that
# stores the turn, with a pg_trgm index where the extension can be had (LIKE on trigrams; without
# it a search reads its memory's rows). Not a schema step, like the floors: made with the schema,
# and an older optictx's turns are indexed by the next search (`PostgresStore._catch_up`).
_TEXT = ("CREATE TABLE IF NOT EXISTS optictx_text (memory BIGINT NOT NULL REFERENCES optictx_memories (id) "
         "ON DELETE CASCADE, id BIGINT NOT NULL, text TEXT NOT NULL, PRIMARY KEY (memory, id))",)
_TRIGRAMS = ("CREATE EXTENSION IF NOT EXISTS pg_trgm",
             "CREATE INDEX IF NOT EXISTS optictx_text_trgm ON optictx_text USING gin (text gin_trgm_ops)")


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
                        raise StoreError(f"{where(url)}: cannot open ({first_line(exc)})") from None
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


POOLS = _Pools()


def pool(url: str, *, create: bool = True) -> ConnectionPool:
    """This process's connection pool for `url`'s database (the schema checked); `release(url)` when done."""
    return POOLS.take(url, create)


def release(url: str) -> None:
    POOLS.give(parse(url)[0])


def pooled(url: str, sql: str, args: tuple[Any, ...], *, create: bool = False) -> list[tuple[Any, ...]]:
    """One statement on this process's pool for `url` (taken and given back): the module-level
    questions a proxy asks often, without a connection of their own each time."""
    shared = pool(url, create=create)
    try:
        with shared.connection() as conn:
            cur = conn.execute(sql, args)
            return cur.fetchall() if cur.description else []
    except psycopg.Error as exc:
        raise StoreError(f"{where(url)}: {first_line(exc)}") from None
    finally:
        release(url)


def connect(url: str) -> psycopg.Connection[Any]:
    """One direct connection (autocommit), a StoreError naming the database when refused."""
    try:
        return psycopg.connect(parse(url)[0], autocommit=True, connect_timeout=_CONNECT_TIMEOUT_S)
    except psycopg.Error as exc:
        raise StoreError(f"{where(url)}: cannot connect ({first_line(exc)})") from None


def ensure_schema(conn: psycopg.Connection[Any], url: str, create: bool) -> None:
    """Check the database's optictx schema, creating or migrating it forward where allowed."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
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
        for sql in _TEXT:
            conn.execute(sql)
        with contextlib.suppress(psycopg.Error), conn.transaction():  # a savepoint: no extension, no index
            for sql in _TRIGRAMS:
                conn.execute(sql)


def retrying(shared: ConnectionPool, work: Any, *, attempts: int = RETRIES) -> Any:
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


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
