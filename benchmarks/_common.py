"""Helpers shared by the benchmarks: conversations of a given size and a robust timer."""

from __future__ import annotations

import time
from collections.abc import Callable

from optictx.sample import sample_conversation
from optictx.tokens import get_tokenizer


def conversation_of(tokens: int) -> list[dict]:
    """The sample conversation generator, grown until its text holds about `tokens` tokens."""
    tok = get_tokenizer()
    per_task = sum(tok.count(str(m.get("content") or "")) for m in sample_conversation(tasks=4)) / 4
    return sample_conversation(tasks=max(1, round(tokens / per_task)))


def clock() -> float:
    """CPU seconds of this process. All the work measured here is single-threaded CPU work, and
    on this shared VM wall time swings by a third between runs while CPU time holds steady."""
    return time.process_time()


def best_of(fn: Callable[[], object], repeat: int = 5) -> float:
    """Minimum CPU time of `repeat` runs, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t0 = clock()
        fn()
        best = min(best, clock() - t0)
    return best
