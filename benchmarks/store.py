"""Persistence costs: `add` into a SQLite and a PostgreSQL memory (each turn committed, or grouped
with `batch()` of 100) as a ratio to the in-memory `add`, and reopening a memory from its stored
pages vs re-packing every turn, on each backend.

    python benchmarks/store.py [--tokens 100000] [--repeat 3] [--no-postgres]

PostgreSQL is a throwaway cluster on loopback (tests/pgcluster.py) with fsync on, as SQLite runs
`synchronous=FULL`: both wait for the disk on every commit. Wall time (time.perf_counter), not
CPU time: much of the cost is waiting for the disk and the server. Each figure is the median of
`--repeat` runs over the same conversation. The crash and concurrency figures come from the long
tests: `make test-long`.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

from _common import conversation_of

from optictx import Budget, Memory

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tests' throwaway cluster
from pgcluster import Cluster, binaries

BUDGET = Budget(tokens=8192)


def add_all(msgs, store, batch: int) -> float:
    mem = Memory(store=store, budget=BUDGET)
    t0 = time.perf_counter()
    for i in range(0, len(msgs), batch):
        with mem.batch():
            for m in msgs[i : i + batch]:
                mem.add(m)
    elapsed = time.perf_counter() - t0
    mem.close()
    return elapsed


def drop_pages(store: str) -> None:
    if store.startswith("postgresql://"):
        import psycopg

        with psycopg.connect(store.split("?")[0], autocommit=True) as conn:
            conn.execute("DELETE FROM optictx_pages")
    else:
        with sqlite3.connect(store) as db:
            db.execute("DELETE FROM pages")


def timed_open(store: str, *, repack: bool) -> float:
    if repack:
        drop_pages(store)
    t0 = time.perf_counter()
    mem = Memory.open(store)
    elapsed = time.perf_counter() - t0
    mem.close()
    return elapsed


def stored_bytes(store: str) -> int:
    """What the backend holds for one memory: the SQLite file, or the rows' bytes in PostgreSQL."""
    if not store.startswith("postgresql://"):
        return Path(store).stat().st_size
    import psycopg

    with psycopg.connect(store.split("?")[0]) as conn:
        return int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-postgres", dest="postgres", action="store_false")
    ap.add_argument("--out", default="out/store.json")
    args = ap.parse_args()
    msgs = conversation_of(args.tokens)
    n = len(msgs)
    backends = ["sqlite"] + (["postgres"] if args.postgres and binaries() else [])
    runs: dict[str, list[float]] = {"memory": []}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp, Cluster(fsync=True) if "postgres" in backends else nullcontext() as pg:
        empty = {}
        if pg is not None:
            db = pg.database()
            empty["postgres"] = stored_bytes(pg.url(db))

        def store(backend: str, name: str) -> str:
            return str(Path(tmp) / f"{name}.db") if backend == "sqlite" else pg.url(db, memory=name)

        for r in range(args.repeat):
            runs["memory"].append(add_all(msgs, None, 1))
            for backend in backends:
                for batch in (1, 100):
                    key = backend if batch == 1 else f"{backend}_batch100"
                    runs.setdefault(key, []).append(add_all(msgs, store(backend, f"{key}{r}"), batch))
                path = store(backend, f"{backend}{r}")
                runs.setdefault(f"{backend}_open_pages", []).append(timed_open(path, repack=False))
                runs.setdefault(f"{backend}_open_repack", []).append(timed_open(path, repack=True))
                if r == 0 and backend == "sqlite":
                    sizes[backend] = stored_bytes(path)
        if pg is not None:  # every memory of the run, less the empty database, per memory
            memories = 2 * args.repeat
            sizes["postgres"] = (stored_bytes(pg.url(db)) - empty["postgres"]) // memories
    med = {k: statistics.median(v) for k, v in runs.items()}
    adds = ["memory", *[k for b in backends for k in (b, f"{b}_batch100")]]
    result = {
        "turns": n, "tokens": args.tokens, "repeat": args.repeat, "bytes_per_memory": sizes,
        "add_us": {k: round(med[k] / n * 1e6) for k in adds},
        "add_ratio_to_memory": {k: round(med[k] / med["memory"], 2) for k in adds[1:]},
        "open_s": {k: round(med[k], 3) for k in med if "_open_" in k},
        "open_speedup": {b: round(med[f"{b}_open_repack"] / med[f"{b}_open_pages"], 1) for b in backends},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"{n} turns (~{args.tokens:,} tokens), median of {args.repeat}; stored per memory: "
          + ", ".join(f"{b} {v / 2**20:.1f} MiB" for b, v in sizes.items()))
    print("| add into | µs per add | vs in-memory |\n|---|---:|---:|")
    labels = {"memory": "in-memory store", "sqlite": "SQLite, fsync per add",
              "sqlite_batch100": "SQLite, batch() of 100", "postgres": "PostgreSQL, commit per add",
              "postgres_batch100": "PostgreSQL, batch() of 100"}
    for k in adds:
        ratio = "1.00" if k == "memory" else f"{result['add_ratio_to_memory'][k]:.2f}"
        print(f"| {labels[k]} | {result['add_us'][k]} | {ratio}x |")
    for b in backends:
        print(f"reopen {b}: {med[f'{b}_open_pages']:.2f} s from stored pages vs {med[f'{b}_open_repack']:.2f} s "
              f"re-packing ({result['open_speedup'][b]}x)")


if __name__ == "__main__":
    main()
