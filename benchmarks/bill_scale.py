"""How `optictx bill`'s time grows with a session's length: sessions of N short messages (a
person and an agent taking turns, a few words each, made here), replayed as `optictx bill`
replays them, each request built from the one before (`eval/grown.py`); with `--wire`, each
request also written whole and read as `optictx serve` reads it (the old way, and the oracle:
the rows must be equal), on the lengths up to `--wire-max`.

    python benchmarks/bill_scale.py 1000 2000 4000 8000 [--budget 8000] [--wire-max 2000]

Prints, per length: requests, seconds, milliseconds per message, and the ratio of this length's
time per message to the first length's (1.0: time proportional to the messages).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from pathlib import Path

from optictx.eval.bill import replay
from optictx.eval.sessions import load_session

WORDS = ["alpha", "beta", "gamma", "delta", "file", "read", "test", "pass", "fail", "def", "class", "return", "value",
         "index"]


def session_file(n: int, folder: Path) -> Path:
    """N messages, user and assistant in turn, 3 to 12 words each (seeded: the same every run)."""
    rng = random.Random(0)
    path = folder / f"short-{n}.jsonl"
    with path.open("w") as f:
        for i in range(n):
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) + f" #{i}"
            f.write(json.dumps({"role": "user" if i % 2 == 0 else "assistant", "content": text}) + "\n")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lengths", nargs="+", type=int, help="messages per session")
    ap.add_argument("--budget", type=int, help="X-Optictx-Budget (default: the proxy's)")
    ap.add_argument("--wire-max", type=int, default=0, help="also replay on the wire up to this length")
    args = ap.parse_args()
    first = None
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.lengths:
            session = load_session(session_file(n, Path(tmp)))
            t0 = time.perf_counter()
            bill = replay(session, budget=args.budget)
            seconds = time.perf_counter() - t0
            per = seconds / n * 1000
            first = first or per
            line = (f"{n:>7} messages {len(bill.rows):>6} requests {seconds:8.1f} s {per:6.2f} ms/message "
                    f"x{per / first:.2f} ratio {bill.ratio:.3f}")
            if n <= args.wire_max:
                t0 = time.perf_counter()
                wire = replay(session, budget=args.budget, wire=True)
                same = "equal" if wire.rows == bill.rows else "DIFFER"
                line += f"  wire {time.perf_counter() - t0:.1f} s, rows {same}"
            print(line, flush=True)


if __name__ == "__main__":
    main()
