"""Recall and search (issue 45): the exact turns behind a page, and the turns that hold a string,
on both stores. The oracle is what the test added: the turns' own text, never optictx's output."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from optictx import Memory, OptictxError
from optictx.recall import MAX_CHARS, RecallError
from optictx.store import open_store
from optictx.store.textindex import terms

NEEDLES = ["sha 9f3c2a71be04", "path src/app/db/migrations/0042_add_index.py", "Grüße aus Köln — Ωμέγα 测试",
           "call foo.bar(x=1, y='z')", "ERR_CONN_RESET@10.0.3.7:5432"]


def _turns(n: int = 120) -> list[dict]:
    """A coding session: a user request, a tool call and its result, an answer; needles early on."""
    out: list[dict] = []
    for i in range(n // 4):
        needle = NEEDLES[i] if i < len(NEEDLES) else f"step {i}"
        out += [{"role": "user", "content": f"step {i}: look at the failure ({needle})"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": f"call_{i}", "type": "function",
                 "function": {"name": "bash", "arguments": json.dumps({"command": f"grep -rn item_{i} src/"})}}]},
                {"role": "tool", "tool_call_id": f"call_{i}", "content": "\n".join(
                    f"src/mod_{i}.py:{k}: value_{i}_{k} = compute({k})" for k in range(12))},
                {"role": "assistant", "content": f"Found it in mod_{i}; next."}]
    return out


@pytest.fixture
def memory(backend):
    mem = Memory(store=backend.spec(), budget=3000, keep_recent=4)
    with mem.batch():
        for t in _turns():
            mem.add(t)
    yield mem
    mem.close()


def test_search_finds_words_exact_strings_and_unicode_newest_first(memory):
    for needle in NEEDLES:
        found = memory.search(needle.split(" ", 1)[1] if needle.startswith(("sha", "path")) else needle)
        texts = [h.turn.text for h in found.hits]
        assert texts and all(needle.split(" ", 1)[-1].lower() in t.lower() for t in texts), needle
    found = memory.search("VALUE_7_3")  # any case, inside a tool result
    assert [h.turn.role for h in found.hits] == ["tool"] and "value_7_3" in found.hits[0].turn.text
    hits = memory.search("Found it", limit=50).hits
    assert [h.turn.id for h in hits] == sorted((h.turn.id for h in hits), reverse=True) and len(hits) == 30
    assert memory.search('"item_12 src"').hits[0].turn.tool_calls  # a quoted phrase, in a tool call's arguments
    assert not memory.search("value_7_3 nowhere-to-be-found").hits  # every term must be found


def test_a_hit_names_the_page_that_shows_it_and_recall_gives_its_turns_as_added(memory):
    added = _turns()
    hit = memory.search("0042_add_index").hits[0]
    page = next(p for p in memory.pages if p.handle == hit.page)
    assert hit.turn.id in page.turn_ids
    recalled = memory.recall(hit.page)
    first, last = min(page.turn_ids), max(page.turn_ids)
    for tid in range(first, last + 1):
        t = added[tid]
        assert t["content"] in recalled.text  # word for word, as the test added it
        for c in t.get("tool_calls", []):
            assert c["function"]["arguments"] in recalled.text and c["id"] in recalled.text
    narrowed = memory.recall(hit.page, grep="0042_ADD")
    assert "0042_add_index.py" in narrowed.text and "value_" not in narrowed.text
    one = memory.recall(hit.page, turns=str(hit.turn.id))
    assert [t.id for t in one.turns] == [hit.turn.id]


def test_every_hit_names_the_page_that_holds_its_turn_first_and_last_turns_too(memory):
    """Each turn on a page, its first and its last included, searched for by a string only it
    holds: the hit names that page (a hit on a page's last turn once named none). The oracle is
    the pages' own turn ids, not the search."""
    pages = [p for p in memory.pages if p.handle and p.turn_ids]
    assert len(pages) > 3
    added = _turns()
    checked = 0
    for page in pages:
        for tid in sorted({min(page.turn_ids), max(page.turn_ids)}):
            if added[tid]["role"] != "tool":  # a tool result's first line: a string only this turn holds
                continue
            line = added[tid]["content"].split("\n")[0].split(": ", 1)[1]
            hits = [h for h in memory.search(line).hits if h.turn.id == tid]
            assert hits and all(h.page == page.handle or tid in next(
                q for q in pages if q.handle == h.page).turn_ids for h in hits), (tid, page.handle, hits)
            checked += 1
    assert checked >= 2


def test_a_long_recall_is_cut_and_goes_on_from_its_offset(backend):
    mem = Memory(store=backend.spec(), budget=2000, keep_recent=2)
    big = "\n".join(f"line {k:05d} " + "x" * 60 for k in range(900))  # ~65k characters in one tool result
    mem.add({"role": "user", "content": "dump it"})
    mem.add({"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
             "function": {"name": "cat", "arguments": "{}"}}]})
    mem.add({"role": "tool", "tool_call_id": "c1", "content": big})
    for i in range(12):
        mem.add({"role": "user", "content": f"more {i} " * 40})
    page = next(p for p in mem.pages if 2 in p.turn_ids and p.handle)
    seen, offset = [], 0
    for _ in range(20):
        r = mem.recall(page.handle, turns="2", offset=offset)
        assert len(r.text) <= MAX_CHARS + 400
        seen.append(r.text.split("\n", 1)[1].split("\n[... ")[0])
        if r.more is None:
            break
        offset = r.more
    assert r.more is None and len(seen) > 3
    assert big in "".join(seen)  # the pieces, joined, hold the whole result
    mem.close()


def test_bad_arguments_are_clear_errors(memory):
    handle = memory.pages[0].handle
    for call, field in [(lambda: memory.recall("k7m3pdxaw"), "page"), (lambda: memory.recall("not a handle!"), "page"),
                        (lambda: memory.recall(handle, turns="9999"), "turns"),
                        (lambda: memory.recall(handle, turns="a-b"), "turns"),
                        (lambda: memory.recall(handle, offset=-1), "offset"),
                        (lambda: memory.recall(handle, grep=""), "grep"),
                        (lambda: memory.search(""), "query"), (lambda: memory.search("ab"), "query"),
                        (lambda: memory.search("x" * 500), "query"), (lambda: memory.search("abc", limit=0), "limit"),
                        (lambda: memory.search("abc", within="k7m3pdxaw"), "page")]:
        with pytest.raises(RecallError, match=field):
            call()


def test_the_tools_answer_each_api_in_its_own_shape(memory):
    tools = memory.tools()
    assert [t["function"]["name"] for t in tools.openai()] == ["search", "recall"]
    assert [t["name"] for t in tools.responses()] == [t["name"] for t in tools.anthropic()] == ["search", "recall"]
    handle = memory.search("ERR_CONN_RESET").hits[0].page
    chat = tools.run({"id": "c9", "type": "function", "function": {"name": "recall",
                                                                    "arguments": json.dumps({"page": handle})}})
    assert chat["role"] == "tool" and chat["tool_call_id"] == "c9" and "ERR_CONN_RESET@10.0.3.7:5432" in chat["content"]
    resp = tools.run({"type": "function_call", "call_id": "r1", "name": "search",
                      "arguments": json.dumps({"query": "ERR_CONN_RESET"})})
    assert resp["type"] == "function_call_output" and resp["call_id"] == "r1" and handle in resp["output"]
    bad = tools.run({"type": "tool_use", "id": "t1", "name": "recall", "input": {"page": "k7m3pdxaw"}})
    assert bad["is_error"] and bad["tool_use_id"] == "t1" and "no page" in bad["content"]
    assert tools.run({"type": "tool_use", "id": "t2", "name": "delete", "input": {}})["is_error"]
    assert "JSON" in tools.run({"id": "c", "type": "function", "function": {"name": "search", "arguments": "{"}})[
        "content"]
    with pytest.raises(OptictxError, match="tool call"):
        tools.run("recall k7m3pdxaw")


def test_the_caption_names_the_tools_only_when_given(memory):
    plain = memory.context(commit=False)
    told = memory.context(commit=False, tools=("mcp__optictx__search", "mcp__optictx__recall"))
    caption = next(s.text for s in plain.segments if getattr(s, "kind", None) == "caption")
    told_caption = next(s.text for s in told.segments if getattr(s, "kind", None) == "caption")
    assert "mcp__optictx" not in caption and "call mcp__optictx__search first" in told_caption
    assert "mcp__optictx__recall a page" in told_caption  # search first, recall for more: one line
    assert told.tokens <= 3000


def test_an_index_is_built_for_a_store_made_before_it(tmp_path):
    path = tmp_path / "old.db"
    mem = Memory(store=path, budget=3000)
    for t in _turns(40):
        mem.add(t)
    mem.close()
    with sqlite3.connect(path) as db:  # as an optictx before the index wrote the file
        db.execute("DROP TABLE turns_text")
    store = open_store(path)
    assert [t.id for t in store.find(terms("0042_add_index"), 5)] == [4]
    store.close()


_WRITER = textwrap.dedent("""
    import sys
    from optictx.store import open_store
    from optictx.turns import Turn
    store = open_store(sys.argv[1])
    i = 0
    while True:
        store.append(Turn(role="user", content=f"marker-{i:06d} " + "word " * 200))
        print(i, flush=True)
        i += 1
""")


def test_a_writer_killed_mid_add_leaves_turns_and_index_agreeing(backend):
    spec = backend.spec("killed")
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, spec], stdout=subprocess.PIPE, env=env)
    for _ in range(30):
        proc.stdout.readline()
    time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    if backend.kind == "sqlite":  # as the kill left it, before an open catches the index up
        with sqlite3.connect(spec) as db:
            assert [r[0] for r in db.execute("SELECT rowid FROM turns_text ORDER BY rowid")] == \
                [r[0] for r in db.execute("SELECT id FROM turns ORDER BY id")]
    store = open_store(spec)
    turns = store.since(-1)
    assert len(turns) >= 30
    for t in turns[-5:] + turns[:3]:  # each stored turn is found by its marker, and only it
        marker = t.text.split()[0]
        assert [x.id for x in store.find(terms(marker), 5)] == [t.id]
    store.close()


def test_one_search_gives_the_exact_lines_bounded(memory):
    """What exactly was X: one call gives the hit's page, turn and role, and the lines that hold
    X whole with a line either side, all of it under 2,000 tokens (cl100k_base) however many
    turns match; the query is said back bounded; its own earlier answers are never hits."""
    from optictx.recall import SEARCH_TOKENS
    from optictx.tokens import get_tokenizer

    count = get_tokenizer().count
    added = _turns()
    hit_text = memory.search("value_7_3").text
    lines = added[30]["content"].split("\n")
    assert "\n".join(f"{k + 1}: {lines[k]}" for k in (2, 3, 4)) in hit_text  # whole, numbered, one either side
    assert "#30 tool (page " in hit_text and lines[0] not in hit_text  # only around the match
    many = memory.search("compute", limit=50).text
    assert count(many) <= SEARCH_TOKENS + 60 and "more hits not shown" in many
    memory.add({"role": "tool", "tool_call_id": "x", "content": memory.search("value_7_3").text})  # an answer stored
    assert [h.turn.id for h in memory.search("value_7_3").hits] == [30]
    long = "value_7_3 " + "z" * 500_000
    with pytest.raises(RecallError):
        memory.search(long)  # too long a term: an error, not the whole query said back
    said = memory.search("value_7_3 " * 3).text
    assert len(said.split("\n", 1)[0]) < 400


def test_recall_gives_only_the_lines_asked_and_says_when_past_the_end(memory):
    hit = memory.search("value_7_3").hits[0]
    one = memory.recall(hit.page, turns=str(hit.turn.id), lines="3-5")
    assert one.text.splitlines()[1:] == [f"#{hit.turn.id} tool (result of call_7):", "3: src/mod_7.py:2: value_7_2 = "
                                         "compute(2)", "4: src/mod_7.py:3: value_7_3 = compute(3)",
                                         "5: src/mod_7.py:4: value_7_4 = compute(4)"]
    with pytest.raises(RecallError, match="lines: give one turn"):
        memory.recall(hit.page, lines="3-5")
    with pytest.raises(RecallError, match="past the end"):
        memory.recall(hit.page, offset=10**6)
    with pytest.raises(RecallError, match="page: a page handle"):
        memory.recall("zzzzzzzzz")
