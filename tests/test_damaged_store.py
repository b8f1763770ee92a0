"""Damaged memory files: every damage is a StoreError naming the file, or an open that reads back
exactly what was stored. Never another exception, never a silently different turn."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path

import pytest

from optictx import Budget, Memory, StoreError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import hostile


@pytest.fixture(scope="module")
def original(tmp_path_factory, sample):
    path = tmp_path_factory.mktemp("orig") / "mem.db"
    mem = Memory(store=path, budget=Budget(tokens=3000))
    for m in sample[:60]:
        mem.add(m)
    mem.context()
    mem.close()
    return path.read_bytes(), [t.model_dump() for t in Memory.open(path).transcript()]


def _outcome(path, transcript):
    """'error' (StoreError naming the file) or 'same' (opened, read and exported exactly)."""
    try:
        mem = Memory.open(path)
        got = [t.model_dump() for t in mem.transcript()]
        ctx = mem.context()
        ctx.to_openai(), ctx.to_anthropic()
        mem.close()
    except StoreError as exc:
        assert path.name in str(exc)
        return "error"
    assert got == transcript, "opened with different turns"
    return "same"


def test_random_truncations_and_byte_flips_give_store_error_or_the_same_memory(tmp_path):
    outcomes = hostile.files(150, 0, tmp_path)
    assert not [k for k in outcomes if "CRASH" in k or "without the file" in k], outcomes
    assert outcomes["StoreError naming the file"] > 50 and outcomes["opened, same turns"] > 10, outcomes


def test_random_hostile_turns_never_crash_and_lose_no_acknowledged_turn(backend):
    outcomes = hostile.turns(400, 1, backend.spec("hostile"))
    assert not [k for k in outcomes if "CRASH" in k], outcomes
    assert outcomes["acknowledged turns lost"] == 0 and outcomes["accepted"] > 20, outcomes
    assert outcomes["contexts exported"] > 30, outcomes


@pytest.mark.parametrize("size", [0, 1, 100])
def test_a_file_cut_short_is_refused_by_open_and_by_memory(tmp_path, original, size):
    path = tmp_path / "cut.db"
    path.write_bytes(original[0][:size])
    for make in (Memory.open, lambda p: Memory(store=p)):
        with pytest.raises(StoreError, match=r"cut\.db"):
            make(path)


def _edit(path, sql, *args):
    with sqlite3.connect(path) as db:
        db.execute(sql, args)


@pytest.mark.parametrize(("sql", "args"), [
    ("PRAGMA user_version=-4", ()),
    ("PRAGMA user_version=0", ()),
    ("UPDATE turns SET body = ? WHERE id = 3", ('{"role": "user", "content": "' + "x" * 10 + '"}',)),
    ("UPDATE turns SET body = ? WHERE id = 3", ("[" * 100_000 + "]" * 100_000,)),
    ("UPDATE turns SET body = 5 WHERE id = 3", ()),
    ("UPDATE turns SET body = ? WHERE id = 3", (b"\xff\xfe\x00bytes",)),
    ("UPDATE turns SET id = 99 WHERE id = 3", ()),
    ("UPDATE meta SET value = ? WHERE key = 'memory'", (json.dumps({"budget": {"tokens": -5}}),)),
    ("UPDATE meta SET value = ? WHERE key = 'memory'", (json.dumps({"keep_recent": "four"}),)),
    ("UPDATE meta SET value = ? WHERE key = 'memory'", (json.dumps([1, 2]),)),
    ("UPDATE meta SET value = ? WHERE key = 'memory'", ("{" * 50_000,)),
    ("UPDATE meta SET value = ? WHERE key = 'memory'",
     (json.dumps({"render": {"fallback_fonts": ["/etc/shadow"]}}),)),
    ("DROP TABLE meta", ()),
    ("UPDATE meta SET value = CAST(X'7bff22' AS TEXT) WHERE key = 'memory'", ()),
    ("UPDATE turns SET body = CAST(X'7b22726f6c65223a22ff' AS TEXT) WHERE id = 2", ()),
], ids=["negative schema", "schema 0", "edited turn", "deep row", "number row", "bytes row", "id hole",
        "budget", "keep_recent", "not an object", "deep settings", "font path", "no meta table",
        "settings not UTF-8", "turn not UTF-8"])
def test_each_damage_is_a_store_error_naming_the_file(tmp_path, original, sql, args):
    path = tmp_path / "mem.db"
    path.write_bytes(original[0])
    _edit(path, sql, *args)
    with pytest.raises(StoreError, match=r"mem\.db"):
        Memory.open(path)


def test_opening_writes_nothing_so_a_full_or_read_only_disk_still_reads(tmp_path, original):
    path = tmp_path / "mem.db"
    path.write_bytes(original[0])
    mem = Memory.open(path)  # the settings it stores are already there: no write
    mem.close()
    Memory.open(path).close()
    assert path.read_bytes() == original[0]


def test_a_stored_page_that_is_not_utf8_is_packed_again(tmp_path, original):
    path = tmp_path / "mem.db"
    path.write_bytes(original[0])
    _edit(path, "UPDATE pages SET body = CAST(X'7bff' AS TEXT) WHERE idx = 1")
    assert _outcome(path, original[1]) == "same"  # pages are derived data: re-packed from the turns


@pytest.fixture
def tiny_disk(tmp_path):
    """A 3 MB tmpfs (root only: skipped elsewhere), unmounted afterwards."""
    import os
    import subprocess

    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3M", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("a small disk needs root and mount (tmpfs)")
    try:
        yield mount
    finally:  # lazy: a connection a failing test left open must not keep the mount
        subprocess.run(["umount", "--lazy", str(mount)], check=False)


def test_a_full_disk_refuses_adds_clearly_and_the_memory_still_opens_for_reading(tiny_disk, sample):
    path = tiny_disk / "mem.db"
    mem = Memory(store=path)
    acked = []
    with pytest.raises(StoreError, match=r"mem\.db.*(full|disk)"):
        for i in range(100_000):
            acked.append(mem.add({"role": "user", "content": f"turn {i} " + "filler text " * 400}))
    mem.close()
    assert len(acked) > 10
    again = Memory.open(path)  # writes nothing: the disk is still full
    assert [t.id for t in again.transcript()] == [t.id for t in acked]
    assert again.transcript() == acked
    assert again.context().tokens > 0
    again.close()
