"""Threads and processes writing one memory lose nothing, keep one total order, and readers
building contexts meanwhile see whole turns only (a prefix of that order)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from optictx import Budget, Context, Memory

from store_worker import payload

WORKER = Path(__file__).with_name("store_worker.py")
BUDGET = Budget(tokens=3000)


def _seen(ctx: Context) -> set[int]:
    ids = {s.turn.id for s in ctx.text_segments if s.turn is not None}
    return ids | {t for p in ctx.pages for t in p.turn_ids} | {t for p in ctx.gone for t in p.turn_ids}


def _check_snapshot(ctx: Context) -> None:
    seen = _seen(ctx)
    assert seen == set(range(len(seen))), "a context saw a turn without all the turns before it"
    assert ctx.tokens <= BUDGET.limit


def _check_order(mem: Memory, writers: int, count: int) -> None:
    turns = mem.transcript()
    assert [t.id for t in turns] == list(range(writers * count))
    order: dict[str, list[int]] = {}
    for t in turns:
        tag, i = t.content.split(" ", 1)[0].split(":")
        assert t.content == payload(tag, int(i))
        order.setdefault(tag, []).append(int(i))
    assert all(seq == list(range(count)) for seq in order.values()) and len(order) == writers


def _threads(store, writers: int, count: int) -> None:
    mem = Memory(store=store, budget=BUDGET, keep_recent=3)
    done = threading.Event()
    errors: list[BaseException] = []
    snapshots = [0]

    def write(k: int) -> None:
        try:
            for i in range(count):
                mem.add({"role": "user", "content": payload(f"t{k}", i)})
        except BaseException as exc:  # surfaced below: a thread's failure must fail the test
            errors.append(exc)

    def read() -> None:
        try:
            while not done.is_set():
                ctx = mem.context()
                _check_snapshot(ctx)
                if snapshots[0] % 4 == 0:
                    ctx.to_openai()  # draws pages while the writers lay turns out
                snapshots[0] += 1
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=write, args=(k,)) for k in range(writers)]
    reader = threading.Thread(target=read)
    reader.start()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    done.set()
    reader.join()
    assert not errors, errors[0]
    assert snapshots[0] > 0
    _check_order(mem, writers, count)
    if store is not None:  # the store holds the same memory the threads built
        again = Memory.open(store)
        assert [p.digest for p in again.pages] == [p.digest for p in mem.pages]


def test_threads_adding_and_reading_at_once_in_process():
    _threads(None, writers=8, count=40)


def test_threads_adding_and_reading_at_once(backend):
    _threads(backend.spec(), writers=8, count=40)


def _processes(path: str, writers: int, count: int) -> None:
    Memory(store=path, budget=BUDGET, keep_recent=3).close()
    procs = [subprocess.Popen([sys.executable, str(WORKER), path, f"p{k}", str(count)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(writers)]
    reader = Memory.open(path)
    contexts = 0
    while any(p.poll() is None for p in procs):  # this process reads while the others write
        _check_snapshot(reader.context())
        contexts += 1
    for p in procs:
        out, err = p.communicate()
        assert p.returncode == 0, err[-2000:]
        lines = out.splitlines()
        assert lines[0] == "ready" and len(lines) == count + 1  # then one acknowledgement per add
    _check_order(Memory.open(path), writers, count)
    assert len(reader) == writers * count  # the reader caught up with every writer
    assert contexts > 0


def test_processes_adding_to_one_memory(backend):
    _processes(backend.spec(), writers=4, count=40)


@pytest.mark.slow
def test_8_threads_x_1000_adds_in_process():
    _threads(None, writers=8, count=1000)


@pytest.mark.slow
def test_8_threads_x_1000_adds(backend):
    _threads(backend.spec(), writers=8, count=1000)


@pytest.mark.slow
def test_4_processes_x_1000_adds(backend):
    _processes(backend.spec(), writers=4, count=1000)
