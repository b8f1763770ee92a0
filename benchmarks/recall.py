"""Recall and search: what a model gets back exactly, how fast, and what the index costs.

    python benchmarks/recall.py SESSIONS/claude-code SESSIONS/swe-agent-ctf [--sessions 6] [--pg URL]

1. Needles, per corpus: exact strings a session really holds (ids, hashes, paths: the long
   tokens of its first turns), asked at its end. From the pages: the share Tesseract reads back
   exactly on the page that holds it, at the tier the session's last context sends that page
   (a page gone from the context counts as not read). With the tools: the share one `search`
   finds, whose first hit names a page (or recent text) whose `recall` holds it word for word.
2. Latency: `search` (a rare string, a common word) and `recall` (a whole page), p50 and p99 over
   200 calls, on SQLite and (with `--pg`) PostgreSQL, for memories of 1,000 and 10,000 turns of a
   corpus' turns repeated; the index's size beside the turns' (SQLite: the file's pages by table).
"""

from __future__ import annotations

import argparse
import random
import re
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from optictx import Memory
from optictx.eval.fidelity import jsonl_corpus
from optictx.readers import TesseractReader
from optictx.turns import Turn

TOKEN = re.compile(r"[A-Za-z0-9_./:-]{10,60}")
_EXACT = re.compile(r"(?=.*\d)(?=.*[a-z_./-])")  # a digit and a letter or separator: an id, not a word


def needles(turns: list[Turn], n: int, rng: random.Random) -> list[tuple[int, str]]:
    """Up to `n` (turn id, string) from the session's first third: strings found in one turn only."""
    seen: dict[str, set[int]] = {}
    for t in turns:
        for s in set(TOKEN.findall("\n".join(t.texts))):
            seen.setdefault(s, set()).add(t.id or 0)
    early = len(turns) // 3
    found = sorted((min(ids), s) for s, ids in seen.items() if len(ids) == 1 and min(ids) < early and _EXACT.match(s))
    return rng.sample(found, min(n, len(found)))


def needle_run(corpus: Path, sessions: int, per: int, reader: TesseractReader) -> dict[str, float]:
    files = sorted(corpus.glob("*.jsonl"))[:sessions]
    rng, read, tools, total = random.Random(7), 0, 0, 0
    for f in files:
        turns = jsonl_corpus(f)
        mem = Memory(vision="anthropic", budget=60_000, keep_recent=4)
        with mem.batch():
            for t in turns:
                mem.add(t.model_copy(update={"id": None}))
        ctx = mem.context()
        tiers = {seg.page.index: seg.tier for seg in ctx.pages}
        for tid, s in needles(turns, per, rng):
            total += 1
            page = next((p for p in mem.pages if tid in p.turn_ids), None)
            tier = tiers.get(page.index) if page is not None else None
            if page is not None and tier is not None and tier.is_image:
                got = mem.images.read(reader, [page], tier)[0]
                read += s in got.replace("\n", " ")
            hits = mem.search(f'"{s}"', limit=1).hits
            if hits and hits[0].page:
                tools += s in mem.recall(hits[0].page, turns=str(hits[0].turn.id)).text
            elif hits:
                tools += s in "\n".join(hits[0].turn.texts)  # recent: the context holds it as text
        mem.close()
    return {"needles": total, "read": read / max(1, total), "tools": tools / max(1, total)}


def _timed(call, n: int = 200) -> tuple[float, float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99) - 1]


def latency_run(spec: str, base: list[Turn], n: int) -> dict[str, object]:
    mem = Memory(store=spec, budget=8000, keep_recent=4)
    with mem.batch():
        for i in range(n):
            t = base[i % len(base)]
            mem.add(t.model_copy(update={"id": None, "content": t.text + f" mark{i:05d}x"}))
    rare = f"mark{n - 17:05d}x"  # what one late turn holds
    page = next(p for p in mem.pages if p.handle and p.sealed)
    out: dict[str, object] = {
        "turns": n,
        "search rare p50/p99 ms": _timed(lambda: mem.search(rare, limit=5)),
        "search common p50/p99 ms": _timed(lambda: mem.search("the", limit=10)),
        "recall page p50/p99 ms": _timed(lambda: mem.recall(page.handle)),
    }
    mem.close()
    return out


def index_size(path: str) -> tuple[int, int]:
    """(bytes of the turns table, bytes of the full-text index) in a SQLite memory."""
    with sqlite3.connect(path) as db:
        try:
            rows = dict(db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name").fetchall())
        except sqlite3.OperationalError:
            return 0, 0
    return rows.get("turns", 0), sum(v for k, v in rows.items() if k.startswith("turns_text"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpora", nargs="+", type=Path)
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--per", type=int, default=10, help="needles per session")
    ap.add_argument("--pg", help="a PostgreSQL URL to time too (a database optictx may write)")
    args = ap.parse_args()
    reader = TesseractReader()
    for corpus in args.corpora:
        print(corpus.name, "needles:", needle_run(corpus, args.sessions, args.per, reader))
    base = jsonl_corpus(sorted(args.corpora[0].glob("*.jsonl"))[0])
    with tempfile.TemporaryDirectory() as tmp:
        for n in (1_000, 10_000):
            path = str(Path(tmp) / f"m{n}.db")
            print("sqlite", latency_run(path, base, n), "turns/index bytes:", index_size(path))
            if args.pg:
                sep = "&" if "?" in args.pg else "?"
                print("postgres", latency_run(f"{args.pg}{sep}memory=bench{n}-{time.time_ns()}", base, n))


if __name__ == "__main__":
    main()
