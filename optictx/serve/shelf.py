"""Where the proxy keeps its conversations' memories: nowhere past this process (no `--store`), a
folder of SQLite files (one machine), or a PostgreSQL database that every replica shares."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..store import is_postgres


class Shelf:
    """No store: memories live as long as they are open."""

    persistent = False

    def spec(self, conversation: str, tenant: str) -> str | Path | None:
        """What `Memory(store=...)` takes for this conversation."""
        return None

    def exists(self, conversation: str, tenant: str) -> bool:
        return False

    def discard(self, conversation: str, tenant: str) -> None:
        """Remove a conversation's memory that never made it into the ledger."""


class FolderShelf(Shelf):
    """`{folder}/{conversation}.db`, one SQLite file each."""

    persistent = True

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def spec(self, conversation: str, tenant: str) -> Path:
        return self.folder / f"{conversation}.db"

    def exists(self, conversation: str, tenant: str) -> bool:
        return self.spec(conversation, tenant).exists()

    def discard(self, conversation: str, tenant: str) -> None:
        path = self.spec(conversation, tenant)
        for f in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
            f.unlink(missing_ok=True)


class PostgresShelf(Shelf):
    """Memories named by conversation under the caller's tenant digest, in one database."""

    persistent = True

    def __init__(self, url: str) -> None:
        self.url = url

    def spec(self, conversation: str, tenant: str) -> str:
        parts = urlsplit(self.url)
        query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k not in ("memory", "tenant")]
        query += [("memory", conversation), ("tenant", tenant)]
        return urlunsplit(parts._replace(query=urlencode(query)))

    def exists(self, conversation: str, tenant: str) -> bool:
        from ..store import postgres

        return postgres.exists(self.spec(conversation, tenant))

    def discard(self, conversation: str, tenant: str) -> None:
        from ..store import postgres

        postgres.delete(self.spec(conversation, tenant))


def shelf_for(store: Path | str | None) -> Shelf:
    if store is None:
        return Shelf()
    if is_postgres(store):
        return PostgresShelf(str(store))
    return FolderShelf(Path(store))
