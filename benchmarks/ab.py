"""A/B timing against another commit, in one run: `context()` on 1,000 sealed pages, an agent
loop's turn (add + context + to_openai), and `context()` of a 300-turn SQLite memory that goes as
it came, each tree measured in turn, rounds interleaved so both see the machine at the same
moments. Each tree runs in its own process, on its own sources.

    python benchmarks/ab.py --base HEAD~1 [--rounds 5] [--pages 1000] [--turns 100]

The base is checked out with `git worktree` into a temporary folder and removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Runs inside each tree's process: only API both sides have (Memory, Budget, add, context, pages).
CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])  # benchmarks/_common.py of this run, the same for both trees
from _common import best_of, clock, conversation_of
from optictx import Budget, Memory

pages, turns = int(sys.argv[2]), int(sys.argv[3])
mem = Memory(budget=Budget(tokens=8192), keep_recent=4, tokens_per_page=1000)
while sum(p.sealed for p in mem.pages) < pages:
    for m in conversation_of(20_000)[1:]:
        mem.add(m)
mem.context()
context_ms = best_of(mem.context, 20) * 1000
msgs = conversation_of(200_000)
loop = Memory(budget=Budget(tokens=8192), keep_recent=4)
for m in msgs[:300]:
    loop.add(m)
loop.context().to_openai()
t0 = clock()
for m in msgs[300 : 300 + turns]:
    loop.add(m)
    loop.context().to_openai()
turn_ms = (clock() - t0) / turns * 1000
# A 300-turn memory on a SQLite file that still goes as it came (the proxy's usual case at its
# 128,000-token cap): what a context() costs when the conversation may be sent whole.
import tempfile
with tempfile.TemporaryDirectory() as tmp:
    stored = Memory(budget=Budget(tokens=128_000), store=tmp + "/m.db")
    with stored.batch():
        for m in msgs[:300]:
            stored.add(m)
    stored_ms = best_of(stored.context, 20) * 1000
    stored.close()
print(json.dumps({"context_ms": context_ms, "turn_ms": turn_ms, "stored_ms": stored_ms}))
"""


def _tree(rev: str, into: Path) -> Path:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(into), rev], check=True)
    for room in ("renderers", "models"):  # the installed layout: optictx.renderers, optictx.models
        (into / "optictx" / room).symlink_to(into / room)
    return into


def _run(tree: Path, pages: int, turns: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / "benchmarks"), str(pages), str(turns)],
                         env=env, capture_output=True, text=True, check=True, cwd=tree)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="the commit to compare with (e.g. HEAD~1)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pages", type=int, default=1000)
    ap.add_argument("--turns", type=int, default=100)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = _tree(args.base, Path(tmp) / "base")
        new = _tree("HEAD", Path(tmp) / "head") if _dirty() else ROOT
        try:
            runs: dict[str, list[dict[str, float]]] = {"base": [], "head": []}
            for _ in range(args.rounds):
                runs["base"].append(_run(base, args.pages, args.turns))
                runs["head"].append(_run(new, args.pages, args.turns))
        finally:
            for tree in (base, new):
                if tree != ROOT:
                    subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False)
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.base], capture_output=True,
                         text=True).stdout.strip()
    for key, label in (("context_ms", f"context() on {args.pages} pages"), ("turn_ms", "agent loop turn"),
                       ("stored_ms", "context() of 300 turns on SQLite, as it came")):
        b, h = (min(r[key] for r in runs[side]) for side in ("base", "head"))
        print(f"{label}: base {rev} {b:.2f} ms, HEAD {h:.2f} ms -> {h / b:.2f}x (min of {args.rounds} interleaved)")


def _dirty() -> bool:
    """Uncommitted changes: HEAD is measured from a clean checkout of itself, not this working tree."""
    return bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
