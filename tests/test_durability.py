"""Crash safety: writers killed with SIGKILL at random moments lose no acknowledged turn."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from optictx import Memory

from store_worker import payload  # tests/ is on sys.path (rootdir conftest)

WORKER = Path(__file__).with_name("store_worker.py")


def _kill_rounds(backend, rounds: int, seed: int, per_file: int = 25) -> dict[str, int]:
    """Start a writer, SIGKILL it after a random delay, reopen and check; `rounds` times, on a
    new memory every `per_file` rounds (a memory grows by ~150 turns a round)."""
    rng = random.Random(seed)
    acked: dict[tuple[str, int], int] = {}
    kills_while_writing = total_acked = 0
    for r in range(rounds):
        path = backend.spec(f"mem{r // per_file}")
        if r % per_file == 0:
            acked = {}
        batch = rng.choice([1, 1, 8])  # some rounds commit groups of 8 in one transaction
        proc = subprocess.Popen([sys.executable, str(WORKER), path, f"r{r}", "100000", str(batch)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r % 2:  # any moment: importing, opening (replaying, saving pages), adding
            time.sleep(rng.uniform(0.05, 2.0))
        else:  # while adding
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n", proc.stderr
            time.sleep(rng.uniform(0.0, 0.5))
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL, err[-2000:]
        lines = [ln.split() for ln in out.splitlines(keepends=True) if ln.endswith("\n") and ln != "ready\n"]
        kills_while_writing += bool(lines)
        total_acked += len(lines)
        for tag, i, tid in lines:
            acked[tag, int(i)] = int(tid)
        # Every acknowledged turn is there, verbatim, under its id; the memory still works. (A
        # writer killed before it created the memory leaves none, or an empty one, to open.)
        mem = Memory.open(path) if acked else Memory(store=path)
        turns = mem.transcript()
        assert [t.id for t in turns] == list(range(len(turns)))  # gap-free total order
        for (tag, i), tid in acked.items():
            assert turns[tid].content == payload(tag, i), (tag, i, tid)
        mem.context()
        mem.close()
    return {"rounds": rounds, "acked": total_acked, "kills_while_writing": kills_while_writing}


def test_sigkill_during_adds_loses_no_acknowledged_turn(backend):
    stats = _kill_rounds(backend, rounds=6, seed=1)
    assert stats["kills_while_writing"] >= 2 and stats["acked"] > 0


@pytest.mark.slow
def test_sigkill_100_times(backend):
    stats = _kill_rounds(backend, rounds=100, seed=2)
    print(stats)
    assert stats["kills_while_writing"] >= 50
