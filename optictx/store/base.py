"""What every store is: the `Store` protocol, the in-process default, and `Derived`, the one
place where a database store's settings, pages and floors are cached, checked and forgiven.

A database store supplies rows (`_meta_row`, `_page_rows`, ...), raising a StoreError that names
it when the database fails; `Derived` decodes them (`rowcodec.py`) and decides what a failure
means: damaged settings are an error; damaged or unwritable derived data (pages, floors, the
plan state kept beside the floors) is rebuilt, never an error.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from ..errors import StoreError
from ..turns import Turn
from .rowcodec import decode_meta, intact_floors, intact_pages, seal
from .textindex import holds


class Store(Protocol):
    """Append-only turn storage with ids 0, 1, 2, ... and a cache of derived pages."""

    def append(self, turn: Turn) -> Turn:
        """Store `turn` under the next id and return it with that id."""
        ...

    def since(self, after: int) -> list[Turn]:
        """Turns with an id above `after`, in order (`since(-1)`: all of them)."""
        ...

    def get(self, ids: Iterable[int]) -> dict[int, Turn]: ...

    def find(self, terms: Sequence[str], limit: int) -> list[Turn]:
        """The newest `limit` turns holding every term (`textindex.terms`), newest first."""
        ...

    def get_meta(self) -> dict[str, Any] | None: ...

    def settings(self) -> dict[str, Any] | None:
        """The settings as last read or written (read now if never): a reopen reads them once."""
        ...

    def set_meta(self, meta: dict[str, Any]) -> None: ...

    def load_pages(self, key: str) -> list[str]:
        """The stored page bodies for `key`, in page order; pages under other keys are discarded."""
        ...

    def save_pages(self, key: str, first: int, bodies: Iterable[str]) -> None: ...

    def load_floors(self, gate: str) -> dict[str, str]:
        """The legibility gate's stored findings for gate `gate`: page digest -> body (gate.py)."""
        ...

    def save_floors(self, gate: str, floors: Mapping[str, str]) -> None: ...

    def batch(self) -> AbstractContextManager[None]:
        """Group appends: durable together at the end, all rolled back on an exception."""
        ...

    def close(self) -> None: ...


class MemoryStore:
    """The default: a list in this process."""

    def __init__(self) -> None:
        self._turns: list[Turn] = []
        self._meta: dict[str, Any] | None = None
        self._lock = threading.RLock()

    def append(self, turn: Turn) -> Turn:
        with self._lock:
            stored = turn.model_copy(update={"id": len(self._turns)})
            self._turns.append(stored)
            return stored

    def since(self, after: int) -> list[Turn]:
        return self._turns[after + 1 :]

    def get(self, ids: Iterable[int]) -> dict[int, Turn]:
        return {i: self._turns[i] for i in ids}

    def find(self, terms: Sequence[str], limit: int) -> list[Turn]:
        found = (t for t in reversed(self._turns) if holds(t, terms))  # no index: a scan, in memory
        return list(itertools.islice(found, limit))

    def get_meta(self) -> dict[str, Any] | None:
        return self._meta

    def settings(self) -> dict[str, Any] | None:
        return self._meta

    def set_meta(self, meta: dict[str, Any]) -> None:
        self._meta = dict(meta)

    def load_pages(self, key: str) -> list[str]:
        return []  # pages live in the Memory itself; nothing outlives the process

    def save_pages(self, key: str, first: int, bodies: Iterable[str]) -> None:
        pass

    def load_floors(self, gate: str) -> dict[str, str]:
        return {}  # the gate itself holds what it read

    def save_floors(self, gate: str, floors: Mapping[str, str]) -> None:
        pass

    @contextmanager
    def batch(self) -> Iterator[None]:
        with self._lock:
            mark = len(self._turns)
            try:
                yield
            except BaseException:
                del self._turns[mark:]
                raise

    def close(self) -> None:
        pass


class Derived:
    """Settings, pages and floors of a database store, over the rows its backend reads and writes.

    The settings last read or written are remembered: a reopened memory writes back the settings
    it has just read, and comparing with them costs no round trip (nor a write on a full disk).
    """

    where: object  # the store as errors name it
    _meta: dict[str, Any] | None = None

    # -- what a backend supplies: rows, or a StoreError naming the store ---------------------

    def _meta_row(self) -> Any:
        """The stored settings' body, None when there are none."""
        raise NotImplementedError

    def _put_meta(self, body: str) -> None:
        raise NotImplementedError

    def _page_rows(self, key: str) -> list[tuple[Any, ...]]:
        """(index, body) rows of `key`'s pages in order, after deleting pages under other keys."""
        raise NotImplementedError

    def _put_pages(self, key: str, rows: list[tuple[int, str]]) -> None:
        """Insert (index, body) rows; a page already stored stays."""
        raise NotImplementedError

    def _floor_rows(self, gate: str) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _put_floors(self, gate: str, rows: list[tuple[str, str]]) -> None:
        """Insert or replace (page digest, body) rows."""
        raise NotImplementedError

    # -- the Store methods -------------------------------------------------------------------

    def get_meta(self) -> dict[str, Any] | None:
        body = self._meta_row()
        try:
            meta = None if body is None else decode_meta(body)
        except (ValueError, TypeError, RecursionError, StoreError) as exc:
            raise StoreError(f"{self.where}: corrupt settings ({type(exc).__name__}: {exc})"[:500]) from None
        self._meta = copy.deepcopy(meta)  # the caller may change its copy before writing it back
        return meta

    def settings(self) -> dict[str, Any] | None:
        return copy.deepcopy(self._meta) if self._meta is not None else self.get_meta()

    def set_meta(self, meta: dict[str, Any]) -> None:
        try:
            if (self._meta if self._meta is not None else self.get_meta()) == meta:
                return  # nothing to write: a memory on a full (or read-only) disk still opens
        except StoreError:
            pass  # damaged settings are replaced by the ones given
        self._put_meta(seal(json.dumps(meta)))
        self._meta = copy.deepcopy(meta)

    def load_pages(self, key: str) -> list[str]:
        try:
            return intact_pages(self._page_rows(key))
        except StoreError:
            return []  # derived data: the caller re-packs from the turns

    def save_pages(self, key: str, first: int, bodies: Iterable[str]) -> None:
        with contextlib.suppress(StoreError):  # a cache write: the pages are re-packed on the next open
            self._put_pages(key, [(first + n, seal(b)) for n, b in enumerate(bodies)])

    def load_floors(self, gate: str) -> dict[str, str]:
        try:
            return intact_floors(self._floor_rows(gate))
        except StoreError:
            return {}  # no table yet, or damaged: the gate reads the pages again

    def save_floors(self, gate: str, floors: Mapping[str, str]) -> None:
        with contextlib.suppress(StoreError):  # a cache write: the pages are read again on the next open
            self._put_floors(gate, [(page, seal(body)) for page, body in floors.items()])
