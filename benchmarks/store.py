"""Persistence costs: `add` into a SQLite memory (each turn fsynced, or grouped with `batch()`)
as a ratio to the in-memory `add`, and reopening a memory from its stored pages vs re-packing
every turn.

    python benchmarks/store.py [--tokens 100000] [--repeat 3]

Wall time (time.perf_counter), not CPU time: the cost being measured is the fsync, which the
process spends waiting. Each figure is the median of `--repeat` runs over the same conversation.
The crash and concurrency figures come from the long tests: `make test-long`.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from _common import conversation_of

from optictx import Budget, Memory

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


def timed_open(path: Path, *, drop_pages: bool) -> float:
    if drop_pages:
        with sqlite3.connect(path) as db:
            db.execute("DELETE FROM pages")
    t0 = time.perf_counter()
    mem = Memory.open(path)
    elapsed = time.perf_counter() - t0
    mem.close()
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default="out/store.json")
    args = ap.parse_args()
    msgs = conversation_of(args.tokens)
    n = len(msgs)
    runs: dict[str, list[float]] = {"memory": [], "sqlite": [], "sqlite_batch100": [], "open_pages": [],
                                    "open_repack": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):
            runs["memory"].append(add_all(msgs, None, 1))
            for name, batch in (("sqlite", 1), ("sqlite_batch100", 100)):
                path = Path(tmp) / f"{name}{r}.db"
                runs[name].append(add_all(msgs, path, batch))
            path = Path(tmp) / f"sqlite{r}.db"
            runs["open_pages"].append(timed_open(path, drop_pages=False))
            runs["open_repack"].append(timed_open(path, drop_pages=True))
        size = (Path(tmp) / "sqlite0.db").stat().st_size
    med = {k: statistics.median(v) for k, v in runs.items()}
    result = {
        "turns": n, "tokens": args.tokens, "repeat": args.repeat, "file_bytes": size,
        "add_us": {k: round(med[k] / n * 1e6) for k in ("memory", "sqlite", "sqlite_batch100")},
        "add_ratio_to_memory": {k: round(med[k] / med["memory"], 2) for k in ("sqlite", "sqlite_batch100")},
        "open_s": {k: round(med[k], 3) for k in ("open_pages", "open_repack")},
        "open_speedup": round(med["open_repack"] / med["open_pages"], 1),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"{n} turns (~{args.tokens:,} tokens), median of {args.repeat}, file {size / 2**20:.1f} MiB")
    print("| add into | µs per add | vs in-memory |\n|---|---:|---:|")
    for k, label in (("memory", "in-memory store"), ("sqlite", "SQLite, fsync per add"),
                     ("sqlite_batch100", "SQLite, batch() of 100")):
        ratio = "1.00" if k == "memory" else f"{result['add_ratio_to_memory'][k]:.2f}"
        print(f"| {label} | {result['add_us'][k]} | {ratio}x |")
    print(f"reopen: {med['open_pages']:.2f} s from stored pages vs {med['open_repack']:.2f} s re-packing "
          f"({result['open_speedup']}x)")


if __name__ == "__main__":
    main()
