"""A memory in a SQLite file (WAL, durable adds).

Guarantees of `SQLiteStore` (tested by killing writers with SIGKILL, `tests/test_durability.py`):
- A turn is durable when `append` returns: its transaction is committed and, with
  `synchronous=FULL`, the write-ahead log is fsynced, so it survives the process being killed
  and, as far as the disk honours fsync, the machine losing power.
- Inside `batch()` turns become durable together when the outermost batch exits; an exception
  in the batch rolls all of them back.
- Ids are 0, 1, 2, ... in commit order, across every thread and process writing to the file: a
  writer takes SQLite's write lock (`BEGIN IMMEDIATE`) before it picks the next id, so the
  committed turns are always a gap-free prefix of one total order.
- Pages are derived data, stored beside the turns under a key naming everything that shapes them
  (render settings, fonts, page density, tokenizer). They are a cache: a missing, damaged or
  foreign-keyed page set is rebuilt from the turns, never mixed with pages of other settings.
  The legibility gate's floors are such a cache too, per page digest and gate (reader and
  thresholds): a reopened memory does not read its pages again.
- Every row written since schema 3 carries a CRC-32 of its text, so a flipped byte is a
  StoreError naming the file (or, in a page, a page re-packed), never a silently different turn.
  A turn is read back before it is committed: nothing is stored that cannot be opened again.
  Opening never writes what is already there, so a memory on a full disk still opens for reading.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import StoreError
from ..turns import Turn
from .base import Derived
from .rowcodec import decode_turns, dump_turn, gap_free, load_turn, seal
from .textindex import fts5, holds, searchable

SCHEMA_VERSION = 3
_APP_ID = 0x6F707478  # "optx": marks the file as an optictx memory
_MIN_FILE = 512  # SQLite's smallest page size: every database file holds at least one page
_BUSY_TIMEOUT_S = 60.0  # how long a writer waits for another process's transaction to finish

# Each schema version's tables, created in order; opening an older file runs the missing steps.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: ("CREATE TABLE turns (id INTEGER PRIMARY KEY, body TEXT NOT NULL)",
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"),
    2: ("CREATE TABLE pages (key TEXT NOT NULL, idx INTEGER NOT NULL, body TEXT NOT NULL, "
        "PRIMARY KEY (key, idx))",),
    3: (),  # rows written from here on start with the CRC-32 of their text (seal); older ones do not
}
# The legibility gate's findings: a cache beside the pages, made on its first write. Not a schema
# step: an older optictx opens the file as before and never looks at it.
# The full-text index (textindex.py): turns' lowered text in FTS5 trigrams, contentless (the turns
# hold the text), written in each append's transaction. Derived too: made on open or the first
# search, for a file of any age, and caught up with turns an older optictx appended.
_TEXT_TABLE = ("CREATE VIRTUAL TABLE IF NOT EXISTS turns_text USING fts5(text, tokenize='trigram case_sensitive 1', "
               "content='')")
_INDEX = "INSERT INTO turns_text (rowid, text) VALUES (?, ?)"
_END = 2**62  # past any turn id
_SCAN = 256  # turns read at a time when a search looks through them newest first
_FLOORS_TABLE = ("CREATE TABLE IF NOT EXISTS floors (gate TEXT NOT NULL, page TEXT NOT NULL, body TEXT NOT NULL, "
                 "PRIMARY KEY (gate, page))")


def connect(path: str | Path, wait: float = _BUSY_TIMEOUT_S) -> sqlite3.Connection:
    """A connection as optictx opens every SQLite file: shared by threads, transactions begun
    explicitly, waiting for another process's write up to `wait` seconds."""
    return sqlite3.connect(path, timeout=wait, check_same_thread=False, isolation_level=None)


def durable(db: sqlite3.Connection) -> None:
    """Write-ahead log, fsynced at each commit: a commit survives the process being killed."""
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")


def private_file(path: Path) -> None:
    """Create `path` readable and writable by its owner only (0600), unless it exists."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))


class SQLiteStore(Derived):
    """Turns as JSON rows in SQLite (WAL). Safe to share between threads; one per process.

    `create=False` refuses to start a new memory: the file must already be one.
    """

    def __init__(self, path: str | Path, *, create: bool = True) -> None:
        self.path = self.where = Path(path)
        self._lock = threading.RLock()
        self._depth = 0  # nesting of batch()
        self._indexed = False  # whether the full-text index exists (it is then written with every turn)
        if not create and not self.path.is_file():
            raise StoreError(f"{self.path}: no such memory file")
        size = self.path.stat().st_size if self.path.is_file() else None
        if size == 0:  # SQLite would take it as a new database, hiding a file cut to nothing
            raise StoreError(f"{self.path}: empty file, not an optictx memory (remove it to start a new one)")
        if size is not None and size < _MIN_FILE:  # shorter than one SQLite page: cut, or not SQLite at all
            raise StoreError(f"{self.path}: {size} bytes, too short for an optictx memory (a damaged file?)")
        if size is None:
            private_file(self.path)  # a memory holds a conversation: its owner's to read (WAL files follow)
        try:
            self._db = connect(self.path)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: cannot open ({exc})") from exc
        try:
            durable(self._db)
            self._init_schema(create)
        except (sqlite3.DatabaseError, ValueError) as exc:  # ValueError: bytes that are not UTF-8 text
            self._db.close()
            raise StoreError(f"{self.path}: not a readable optictx memory ({exc})") from exc
        except StoreError:
            self._db.close()
            raise
        with contextlib.suppress(StoreError):  # a read-only file opens, and is searched without the index
            self._catch_up()

    def _init_schema(self, create: bool) -> None:
        with self._write():  # under the write lock: two processes creating one file agree
            app_id = self._db.execute("PRAGMA application_id").fetchone()[0]
            tables = {r[0] for r in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if app_id == 0 and not tables:
                if not create:
                    raise StoreError(f"{self.path}: an empty SQLite file, not an optictx memory")
                self._db.execute(f"PRAGMA application_id={_APP_ID}")
                self._migrate(0)
                return
            if app_id != _APP_ID:
                raise StoreError(f"{self.path}: this SQLite file is not an optictx memory")
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version < 1:
                raise StoreError(f"{self.path}: damaged optictx memory (schema version {version})")
            if version > SCHEMA_VERSION:
                raise StoreError(f"{self.path}: written by a newer optictx (schema {version}, this one reads "
                                 f"up to {SCHEMA_VERSION}); upgrade optictx")
            missing = {"turns", "meta"} - tables
            if missing:
                raise StoreError(f"{self.path}: damaged optictx memory (no {', '.join(sorted(missing))} table)")
            self._migrate(version)

    def _migrate(self, version: int) -> None:
        for step in range(version + 1, SCHEMA_VERSION + 1):
            for sql in _MIGRATIONS[step]:
                self._db.execute(sql)
        if version != SCHEMA_VERSION:
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    @contextmanager
    def _write(self) -> Iterator[None]:
        """One write transaction, or a part of the enclosing batch's."""
        with self._lock:
            if self._depth:
                yield
                return
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Group writes into one transaction: one fsync for all of them, all or nothing."""
        with self._lock:
            try:
                with self._write():
                    self._depth += 1
                    try:
                        yield
                    finally:
                        self._depth -= 1
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{self.path}: could not commit a batch of turns ({exc})") from exc

    def append(self, turn: Turn) -> Turn:
        try:
            with self._write():
                (next_id,) = self._db.execute("SELECT COALESCE(MAX(id) + 1, 0) FROM turns").fetchone()
                stored = turn.model_copy(update={"id": next_id})
                body = dump_turn(stored)
                # Never commit what a later open could not read back. What comes back is the turn
                # as stored: a JSON reader joins a surrogate pair written as two escapes.
                stored = load_turn(body)
                self._db.execute("INSERT INTO turns (id, body) VALUES (?, ?)", (next_id, seal(body)))
                if self._indexed or self._has_index():
                    self._db.execute(_INDEX, (next_id, searchable(stored)))
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: could not store a turn ({exc})") from exc
        except (ValueError, RecursionError) as exc:
            raise StoreError(f"{self.path}: turn {next_id} would not read back ({exc}); nothing stored") from None
        return stored

    def since(self, after: int) -> list[Turn]:
        return gap_free(self._turns("SELECT id, body FROM turns WHERE id > ? ORDER BY id", (after,)), after,
                        self.path)

    def get(self, ids: Iterable[int]) -> dict[int, Turn]:
        ids, out = list(ids), {}
        for i in range(0, len(ids), 500):  # SQLite caps the parameters of one statement
            chunk = ids[i : i + 500]
            marks = ",".join("?" * len(chunk))
            out.update((t.id, t) for t in self._turns(f"SELECT id, body FROM turns WHERE id IN ({marks})", chunk))
        return out

    def find(self, terms: Sequence[str], limit: int) -> list[Turn]:
        """The newest `limit` turns that hold every term (`textindex.py`), newest first."""
        with contextlib.suppress(StoreError):
            self._catch_up()
        match, found, before = fts5(terms) if self._indexed else None, [], None
        while len(found) < limit:
            if match is not None:
                sql = "SELECT rowid FROM turns_text WHERE turns_text MATCH ? AND rowid < ? ORDER BY rowid DESC LIMIT ?"
                ids = [r[0] for r in self._rows("search", sql, (match, _END if before is None else before, _SCAN))]
                turns = self.get(ids)
                page = [turns[i] for i in ids if i in turns]
            else:
                page = self._turns("SELECT id, body FROM turns WHERE id < ? ORDER BY id DESC LIMIT ?",
                                   (_END if before is None else before, _SCAN))
                ids = [t.id for t in page]
            found += [t for t in page if holds(t, terms)]
            if len(ids) < _SCAN:
                break
            before = ids[-1]
        return found[:limit]

    def _has_index(self) -> bool:
        with self._lock:
            self._indexed = self._db.execute(
                "SELECT 1 FROM sqlite_master WHERE name = 'turns_text'").fetchone() is not None
        return self._indexed

    def _catch_up(self) -> None:
        """Make the full-text index, and index the turns it lacks (an older optictx appended them)."""
        with self._cache("index turns"), self._write():
            self._db.execute(_TEXT_TABLE)
            self._indexed = True
            (upto,) = self._db.execute("SELECT COALESCE(MAX(rowid), -1) FROM turns_text").fetchone()
            rows = self._db.execute("SELECT id, body FROM turns WHERE id > ? ORDER BY id", (upto,)).fetchall()
            if rows:
                self._db.executemany(_INDEX, [(t.id, searchable(t)) for t in decode_turns(rows, self.path)])

    def _rows(self, what: str, sql: str, args: Any) -> list[Any]:
        try:
            with self._lock:
                return self._db.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: could not {what} ({type(exc).__name__}: {exc})"[:500]) from None

    def _turns(self, sql: str, args: Any) -> list[Turn]:
        try:
            with self._lock:
                rows = self._db.execute(sql, args).fetchall()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: corrupt turn data ({type(exc).__name__}: {exc})"[:500]) from None
        return decode_turns(rows, self.path)

    # -- the rows under `Derived`: settings, pages, floors -------------------------------------

    def _meta_row(self) -> Any:
        try:
            with self._lock:
                row = self._db.execute("SELECT value FROM meta WHERE key='memory'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: corrupt settings ({type(exc).__name__}: {exc})"[:500]) from None
        return row[0] if row else None

    def _put_meta(self, body: str) -> None:
        try:
            with self._write():
                self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('memory', ?)", (body,))
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: could not store settings ({exc})") from exc

    def _page_rows(self, key: str) -> list[tuple[Any, ...]]:
        with self._cache("read pages"), self._write():
            self._db.execute("DELETE FROM pages WHERE key != ?", (key,))  # other settings: stale
            return self._db.execute("SELECT idx, body FROM pages WHERE key = ? ORDER BY idx", (key,)).fetchall()

    def _put_pages(self, key: str, rows: list[tuple[int, str]]) -> None:
        with self._cache("store pages"), self._write():
            self._db.executemany("INSERT OR IGNORE INTO pages (key, idx, body) VALUES (?, ?, ?)",
                                 [(key, idx, body) for idx, body in rows])

    def _floor_rows(self, gate: str) -> list[tuple[Any, ...]]:
        with self._cache("read floors"), self._lock:
            return self._db.execute("SELECT page, body FROM floors WHERE gate = ?", (gate,)).fetchall()

    def _put_floors(self, gate: str, rows: list[tuple[str, str]]) -> None:
        with self._cache("store floors"), self._write():
            self._db.execute(_FLOORS_TABLE)
            self._db.executemany("INSERT OR REPLACE INTO floors (gate, page, body) VALUES (?, ?, ?)",
                                 [(gate, page, body) for page, body in rows])

    @contextmanager
    def _cache(self, what: str) -> Iterator[None]:
        """Derived rows' failures (no table yet, a lock timeout, a read-only file, bytes that are
        not text) as StoreErrors, which `Derived` forgives."""
        try:
            yield
        except (sqlite3.DatabaseError, ValueError) as exc:
            raise StoreError(f"{self.path}: could not {what} ({exc})") from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

