"""The legibility gate's floors are stored beside the pages: a reopened memory (SQLite or
PostgreSQL) does not read its pages again, other thresholds or another reader do, and a damaged
row costs a read, never a wrong floor."""

import sqlite3

import pytest

from optictx import ConfigError, LegibilityGate, Memory, Tier
from optictx.models import ReflexReader
from optictx.store.rowcodec import seal

TURNS = 90  # about seven sealed pages of the sample conversation


@pytest.fixture(scope="module")
def reader():
    return ReflexReader()


def _filled(spec, gate, sample):
    mem = Memory(store=spec, keep_recent=0, gate=gate, verbatim=False)
    with mem.batch():
        for m in sample[:TURNS]:
            mem.add(m)
    return mem


def test_floors_survive_a_reopen_and_are_not_read_again(backend, sample, reader):
    gate = LegibilityGate(reader, max_cer=0.10)
    mem = _filled(backend.spec(), gate, sample)
    found = mem.legibility()
    sealed = [p for p in mem.pages if p.sealed]
    assert len(found) == len(sealed) >= 4 and gate.reads >= len(sealed)
    for entry, page in zip(found, sealed):
        assert entry["turns"] == [page.turn_ids[0], page.turn_ids[-1]]
        assert entry["cer"] and all(0 <= v <= 1 for v in entry["cer"].values())
        assert set(entry["confidence"]) == set(entry["cer"])  # the reflex reader says how sure it is
        floor = Tier(entry["floor"])
        if floor.is_image:
            assert entry["cer"][floor.value] <= 0.10  # measured at the floor, not assumed
    before = [(s.page.digest, s.tier) for s in mem.context().pages]

    fresh = LegibilityGate(reader, max_cer=0.10)  # a new process: nothing cached in the gate
    again = Memory.open(backend.spec(), gate=fresh)
    assert again.legibility() == found
    assert [(s.page.digest, s.tier) for s in again.context().pages] == before
    assert fresh.reads == 0

    stricter = LegibilityGate(reader, max_cer=0.05)  # other thresholds: other floors, read again
    Memory.open(backend.spec(), gate=stricter).context()
    assert stricter.reads >= len(sealed)


def test_a_damaged_floor_row_is_read_again(tmp_path, sample, reader):
    path = tmp_path / "m.db"
    gate = LegibilityGate(reader, max_cer=0.10)
    found = _filled(path, gate, sample).legibility()
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT rowid FROM floors").fetchall()
        assert len(rows) == len(found)
        db.execute("UPDATE floors SET body = 'x' || substr(body, 2) WHERE rowid = ?", rows[0])  # fails its CRC
        db.execute("UPDATE floors SET body = ? WHERE rowid = ?", (seal("{}"), *rows[1]))  # intact, but no floor
    fresh = LegibilityGate(reader, max_cer=0.10)
    again = Memory.open(path, gate=fresh)
    assert again.legibility() == found  # the same floors, two of them read again
    assert 2 <= fresh.reads <= 2 * len(Tier)
    third = LegibilityGate(reader, max_cer=0.10)
    assert Memory.open(path, gate=third).legibility() == found and third.reads == 0  # and stored again


def test_a_memory_stored_before_any_gate_gets_its_floors_table(tmp_path, sample, reader):
    path = tmp_path / "m.db"
    _filled(path, None, sample)
    with sqlite3.connect(path) as db:
        assert not db.execute("SELECT name FROM sqlite_master WHERE name = 'floors'").fetchall()
    gate = LegibilityGate(reader, max_cer=0.10)
    found = Memory.open(path, gate=gate).legibility()
    assert gate.reads >= len(found) >= 4
    fresh = LegibilityGate(reader, max_cer=0.10)
    assert Memory.open(path, gate=fresh).legibility() == found and fresh.reads == 0


def test_legibility_needs_a_gate():
    with pytest.raises(ConfigError, match="gate"):
        Memory().legibility()
