"""A writer process for the durability and concurrency tests: adds turns to a stored memory and
prints "ready" once the memory is open, then one line per acknowledged turn ("TAG I ID"), flushed,
only after `add` (or its batch) returns.

    python tests/store_worker.py STORE TAG COUNT [BATCH]     (STORE: a SQLite path or a PostgreSQL URL)
"""

from __future__ import annotations

import sys

from optictx import Budget, Memory


def payload(tag: str, i: int) -> str:
    """Deterministic, varied text: the checker rebuilds it from (tag, i)."""
    body = " ".join(f"{tag}-{i}-{j} مرحبا 漢字 🙂" if j % 7 == 0 else f"word{j}" for j in range(i % 37 * 9))
    return f"{tag}:{i} {body}"


def main(path: str, tag: str, count: int, batch: int = 1) -> None:
    mem = Memory(store=path, budget=Budget(tokens=3000), keep_recent=3)
    print("ready", flush=True)
    i = 0
    while i < count:
        group = range(i, min(count, i + batch))
        acks = []
        with mem.batch():
            for k in group:
                acks.append((k, mem.add({"role": "user" if k % 2 else "assistant", "content": payload(tag, k)}).id))
        for k, tid in acks:  # durable now: acknowledge
            print(tag, k, tid, flush=True)
        i += batch


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 1)
