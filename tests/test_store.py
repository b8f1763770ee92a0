import random
import sqlite3

import pytest

from optictx import Budget, Limits, Memory, RenderConfig, StoreError, TurnTooLargeError
from optictx.renderers import Layout
from optictx.store import open_store
from optictx.store.sqlite import _APP_ID, SCHEMA_VERSION


def test_a_stored_memory_reopens_with_ids_settings_and_same_context(backend, sample):
    path = backend.spec("mem")
    mem = Memory(store=path, budget=Budget(tokens=5000), keep_recent=3, vision="anthropic", sticky_tiers=True)
    for m in sample[:80]:
        mem.add(m)
    before = mem.context()
    again = Memory.open(path)
    assert [t.id for t in again.transcript()] == list(range(80))
    assert again.transcript() == mem.transcript()
    assert again.vision.name == "anthropic" and again.keep_recent == 3 and again.sticky_tiers
    after = again.context()
    assert [(p.page.digest, p.tier) for p in after.pages] == [(p.page.digest, p.tier) for p in before.pages]
    assert again.add({"role": "user", "content": "next"}).id == 80


def test_a_sqlite_reopen_reads_its_settings_once(tmp_path, monkeypatch):
    """As on PostgreSQL (tests/test_pgstore.py): the store remembers the settings it last read
    or wrote, so a reopen reads them once and writes nothing when they are unchanged."""
    path = tmp_path / "m.db"
    Memory(store=path, keep_recent=3).close()
    statements: list[str] = []
    connect = sqlite3.connect

    def traced(*args, **kwargs):
        db = connect(*args, **kwargs)
        db.set_trace_callback(statements.append)
        return db

    monkeypatch.setattr(sqlite3, "connect", traced)
    with Memory.open(path):
        pass
    assert sum("FROM meta WHERE key='memory'" in q for q in statements) == 1, statements
    assert not any("INSERT OR REPLACE INTO meta" in q for q in statements)  # nothing to write


def test_changed_settings_and_a_callers_changed_copy_are_written(backend):
    """The settings a store remembers never stop a change from being written."""
    spec = backend.spec()
    Memory(store=spec, keep_recent=3).close()
    with Memory.open(spec, keep_recent=7):
        pass
    store = open_store(spec)
    meta = store.get_meta()
    assert meta["keep_recent"] == 7
    meta["keep_recent"] = 9  # the caller's copy, changed and written back
    store.set_meta(meta)
    store.close()
    with Memory.open(spec) as again:
        assert again.keep_recent == 9


def test_hostile_text_survives_the_store(backend):
    path = backend.spec("m")
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


def _memory(path, sample, n=120, **kw):
    mem = Memory(store=path, budget=Budget(tokens=3000), keep_recent=3, **kw)
    for m in sample[:n]:
        mem.add(m)
    return mem


def test_reopen_restores_stored_pages_instead_of_laying_turns_out_again(backend, sample, monkeypatch):
    path = backend.spec("mem")
    mem = _memory(path, sample)
    sealed = [p.digest for p in mem.pages if p.sealed]
    assert len(sealed) >= 5  # enough sealed pages to restore
    calls = []
    real = Layout.lines
    monkeypatch.setattr(Layout, "lines", lambda self, block: calls.append(block) or real(self, block))
    again = Memory.open(path)
    assert [p.digest for p in again.pages if p.sealed] == sealed
    plan = [(p.page.digest, p.tier) for p in mem.context().pages]
    assert [(p.page.digest, p.tier) for p in again.context().pages] == plan
    # Images are not stored: they are drawn again from the restored lines, pixel for pixel.
    before, after = mem.context().pages, again.context().pages
    assert all(a.image.tobytes() == b.image.tobytes() for a, b in zip(after, before) if a.tier.is_image)
    # Only the turns after the last sealed page (and the one it ends inside) are laid out.
    last_on_pages = max(tid for d in again.pages if d.sealed for tid in d.turn_ids)
    assert calls and len(calls) <= 4 * (120 - last_on_pages)


def test_repacked_pages_equal_restored_ones(tmp_path, sample):
    path = tmp_path / "mem.db"
    _memory(path, sample).close()
    restored = Memory.open(path)
    digests = [p.digest for p in restored.pages]
    restored.close()
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM pages")
    assert [p.digest for p in Memory.open(path).pages] == digests


def test_damaged_page_cache_is_rebuilt_from_the_turns(tmp_path, sample):
    path = tmp_path / "mem.db"
    digests = [p.digest for p in _memory(path, sample).pages]
    with sqlite3.connect(path) as db:
        db.execute("UPDATE pages SET body = 'not json' WHERE idx = 0")
    assert [p.digest for p in Memory.open(path).pages] == digests


def test_changed_render_config_re_renders_pages_and_forgets_the_old_ones(tmp_path, sample):
    path = tmp_path / "mem.db"
    before = {p.digest for p in _memory(path, sample).pages}
    again = Memory.open(path, render=RenderConfig(columns=1))
    after = {p.digest for p in again.pages}
    assert after and not after & before
    again.close()
    with sqlite3.connect(path) as db:
        keys = {k for (k,) in db.execute("SELECT DISTINCT key FROM pages")}
    assert len(keys) == 1 and "columns" not in keys.pop()  # one key: the new settings' pages only


def test_a_larger_keep_recent_on_reopen_keeps_stored_pages_whole(backend, sample):
    path = backend.spec("mem")
    sealed = [p.digest for p in _memory(path, sample).pages if p.sealed]
    again = Memory.open(path, keep_recent=40)
    assert [p.digest for p in again.pages][: len(sealed)] == sealed
    on_pages = {tid for p in again.pages for tid in p.turn_ids}
    assert not on_pages & {t.id for t in again.recent}
    assert on_pages | {t.id for t in again.recent} == {t.id for t in again.transcript() if t.role != "system"}


def test_factsheet_reads_packed_turns_back_from_the_store(backend):
    path = backend.spec("mem")
    mem = Memory(store=path, budget=Budget(tokens=2000), keep_recent=1)
    for i in range(30):
        mem.add({"role": "user", "content": f"order {1_000_000 + i} shipped " + "filler words " * 60})
    mem.close()
    again = Memory.open(path)
    ctx = again.context()
    sheet = next(s for s in ctx.text_segments if s.kind == "factsheet")
    sealed = [tid for p in ctx.pages if p.page.sealed and p.tier.is_image for tid in p.turn_ids]
    assert sealed and all(t.id not in sealed for t in again.recent)  # packed: only the store has them
    assert f"#{sealed[0]}: {1_000_000 + sealed[0]}" in sheet.text


def test_schema_1_files_migrate_forward(tmp_path):
    path = tmp_path / "v1.db"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA application_id={_APP_ID}")
    db.execute("PRAGMA user_version=1")
    db.execute("CREATE TABLE turns (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    body = '{"role": "user", "content": "from v1", "name": null, "tool_calls": [], "tool_call_id": null, ' \
           '"metadata": {}, "pinned": false, "id": 0}'
    db.execute("INSERT INTO turns VALUES (0, ?)", (body,))
    db.commit()
    db.close()
    mem = Memory.open(path)
    assert [t.content for t in mem.transcript()] == ["from v1"]
    mem.add({"role": "assistant", "content": "in v2"})
    mem.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
        assert db.execute("SELECT count(*) FROM pages").fetchone()[0] == 0  # table exists


def test_newer_schema_and_empty_files_are_refused(tmp_path):
    newer = tmp_path / "newer.db"
    Memory(store=newer).close()
    with sqlite3.connect(newer) as db:
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match=r"newer\.db.*newer optictx"):
        Memory.open(newer)
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(StoreError, match=r"empty\.db.*empty file"):
        Memory.open(empty)
    with pytest.raises(StoreError, match=r"empty\.db.*empty file"):  # a file cut to 0 bytes is no new memory
        Memory(store=empty)


@pytest.mark.parametrize("keep", [0.9, 0.5, 0.2])
def test_truncated_files_raise_store_error_naming_the_file(tmp_path, sample, keep):
    path = tmp_path / "mem.db"
    _memory(path, sample, n=len(sample)).close()
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep) // 4096 * 4096])
    with pytest.raises(StoreError, match="mem.db"):
        Memory.open(path)


def test_corrupt_bytes_give_store_error_or_the_intact_transcript(tmp_path, sample):
    path = tmp_path / "mem.db"
    _memory(path, sample, n=len(sample)).close()
    clean, original = path.read_bytes(), Memory.open(path).transcript()
    rng = random.Random(7)
    errors = 0
    for _ in range(12):
        data = bytearray(clean)
        start = rng.randrange(100, len(data) - 512)
        data[start : start + 512] = rng.randbytes(512)
        path.write_bytes(bytes(data))
        try:
            survived = Memory.open(path).transcript()
        except StoreError as exc:
            assert "mem.db" in str(exc)
            errors += 1
        else:
            assert survived == original  # the damage hit derived pages or free space only
    assert errors  # 12 random 512-byte blasts: some hit the turns


def test_batch_is_one_transaction_rolled_back_whole_on_error(backend):
    path = backend.spec("mem")
    mem = Memory(store=path, keep_recent=2)
    mem.add({"role": "user", "content": "before"})
    with mem.batch():
        for i in range(5):
            mem.add({"role": "user", "content": f"in batch {i}"})
        with mem.batch():  # nested: part of the outer one
            mem.add({"role": "user", "content": "nested"})
        assert len(mem) == 7
    assert len(Memory.open(path)) == 7
    with pytest.raises(RuntimeError), mem.batch():
        mem.add({"role": "user", "content": "doomed"})
        raise RuntimeError("agent crashed mid-batch")
    assert [t.content for t in mem.transcript()][-1] == "nested"
    assert len(mem) == 7 and len(Memory.open(path)) == 7
    assert mem.add({"role": "user", "content": "after"}).id == 7


def test_batch_rolls_back_the_in_memory_store_too():
    mem = Memory(keep_recent=1)
    mem.add({"role": "user", "content": "kept"})
    with pytest.raises(KeyError), mem.batch():
        mem.add({"role": "user", "content": "gone"})
        raise KeyError
    assert [t.content for t in mem.transcript()] == ["kept"] and len(mem) == 1


def test_turns_over_the_size_limit_are_refused_before_storing(backend):
    mem = Memory(store=backend.spec("m"), limits=Limits(max_turn_chars=1000))
    with pytest.raises(TurnTooLargeError, match="max_turn_chars"):
        mem.add({"role": "user", "content": "x" * 1001})
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 2000}}
    with pytest.raises(TurnTooLargeError):
        mem.add({"role": "user", "content": [part]})
    assert len(mem) == 0 and mem.transcript() == []


def test_a_changed_font_file_re_renders_pages(backend, tmp_path, sample):
    from optictx.renderers import fonts

    font = tmp_path / "fallback.ttf"
    font.write_bytes(fonts.MONO.read_bytes())
    path = backend.spec("mem")
    before = {p.digest for p in _memory(path, sample, render=RenderConfig(fallback_fonts=(str(font),))).pages}
    font.write_bytes(fonts.SANS_BOLD.read_bytes())  # same path and settings, other glyphs
    for cached in (fonts._fontset, fonts._file_digest, fonts._coverage, fonts._truetype):
        cached.cache_clear()  # as a new process would: font files are read once per process
    after = {p.digest for p in Memory.open(path).pages}
    assert after and not after & before


def test_a_missing_turn_row_is_reported_not_skipped(tmp_path, sample):
    path = tmp_path / "mem.db"
    _memory(path, sample, n=20).close()
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM turns WHERE id = 7")
    with pytest.raises(StoreError, match=r"mem\.db.*turn 7 is missing"):
        Memory.open(path)


def test_pages_with_collapsed_whitespace_reopen_the_same(backend):
    # Blank-line runs, trailing blanks and carriage returns are left off the page, not the
    # transcript: a reopened memory restores the same pages and draws the same pixels.
    path = backend.spec("mem")
    noisy = "$ make   \r\n\r\n\r\nbuilding 10%\rbuilding 100%\n\n\n\n" + "ok  \n\n" * 20
    mem = Memory(store=path, keep_recent=2, verbatim=False)
    for i in range(40):
        mem.add({"role": "user" if i % 2 else "assistant", "content": f"{i} {noisy}"})
    pages = [(p.digest, p.text) for p in mem.pages if p.sealed]
    images = [mem.images.master(p).tobytes() for p in mem.pages if p.sealed]
    mem.close()
    again = Memory.open(path)
    assert [(p.digest, p.text) for p in again.pages if p.sealed] == pages
    assert [again.images.master(p).tobytes() for p in again.pages if p.sealed] == images
    assert [t.content for t in again.transcript()] == [f"{i} {noisy}" for i in range(40)]
