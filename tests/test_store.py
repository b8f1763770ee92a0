import sqlite3

import pytest

from optictx import Budget, Memory, StoreError


def test_sqlite_memory_reopens_with_ids_settings_and_same_context(tmp_path, sample):
    path = tmp_path / "mem.db"
    mem = Memory(store=path, budget=Budget(tokens=5000), keep_recent=3, vision="anthropic")
    for m in sample[:80]:
        mem.add(m)
    before = mem.context()
    again = Memory.open(path)
    assert [t.id for t in again.transcript()] == list(range(80))
    assert again.transcript() == mem.transcript()
    assert again.vision.name == "anthropic" and again.keep_recent == 3
    after = again.context()
    assert [(p.page.digest, p.tier) for p in after.pages] == [(p.page.digest, p.tier) for p in before.pages]
    assert again.add({"role": "user", "content": "next"}).id == 80


def test_hostile_text_survives_the_store(tmp_path):
    path = tmp_path / "m.db"
    mem = Memory(store=path)
    text = "nul\x00 lone\ud800 rtl\u202e emoji 🙂 <|endoftext|>"
    mem.add({"role": "user", "content": text})
    assert Memory.open(path).transcript()[0].content == text


def test_foreign_or_corrupt_files_raise_store_error(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="junk.db"):
        Memory(store=junk)
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(StoreError, match="not an optictx memory"):
        Memory(store=other)
    with pytest.raises(StoreError, match="no such memory"):
        Memory.open(tmp_path / "missing.db")
