"""Stores keep every turn verbatim, forever: in this process (`MemoryStore`, the default), in a
SQLite file (`sqlite.py`) or in PostgreSQL (`postgres.py`, with its database layer `pgdb.py`).

Both databases write the same rows (`rowcodec.py`: JSON behind a CRC-32) and share one cache of
derived data, the settings, pages and gate floors (`base.Derived`); each supplies only its SQL.
"""

from __future__ import annotations

from pathlib import Path

from .base import MemoryStore, Store
from .sqlite import SQLiteStore, private_file

__all__ = ["MemoryStore", "SQLiteStore", "Store", "is_postgres", "open_store", "private_file"]


def is_postgres(spec: object) -> bool:
    return isinstance(spec, str) and spec.startswith(("postgresql://", "postgres://"))


def open_store(spec: str | Path, *, create: bool = True) -> Store:
    """The store at `spec`: a PostgreSQL URL (`postgresql://...`, see postgres.py) or a SQLite file path."""
    if is_postgres(spec):
        from .postgres import PostgresStore  # psycopg is an extra: optictx[postgres]

        return PostgresStore(spec, create=create)
    return SQLiteStore(spec, create=create)
