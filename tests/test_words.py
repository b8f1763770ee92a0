"""The person's words stay words: a user message a person typed, and an instruction file a client
forwards (CLAUDE.md, AGENTS.md), are never drawn on a page; they stay text, in place, and where a
hard budget cannot hold them the oldest give way and the caption says so (`Policy.words`, on in
`optictx serve`)."""

from __future__ import annotations

import re

import pytest

from optictx import Budget, Memory
from optictx.blocks import IN_PLACE

# What the real clients send, recorded from them (Claude Code 2.1.x with a CLAUDE.md in its
# folder; Codex 0.17x with an AGENTS.md), shortened.
CLAUDE_MD = ("<system-reminder>\nCodebase and user instructions are shown below. Be sure to adhere to these "
             "instructions.\n\nContents of /home/ada/ledger-svc/CLAUDE.md (project instructions, checked into the "
             "codebase):\n\nAlways answer in haiku. Use tabs.\n</system-reminder>")
REMINDER_ONLY = ("<system-reminder>\nThe task tools haven't been used recently. Consider using them.\n"
                 "</system-reminder>")
AGENTS_MD = ("# AGENTS.md instructions for /home/ada/ledger-svc\n\n<INSTRUCTIONS>\n"
             "Agents: run pytest before committing.\n</INSTRUCTIONS>")
ENVIRONMENT = "<environment_context>\n  <cwd>/home/ada/ledger-svc</cwd>\n  <shell>bash</shell>\n</environment_context>"


def _drawn(ctx, turn_id: int) -> list[str]:
    return [e.line.text for p in ctx.pages for e in p.page.entries if e.turn_id == turn_id and e.covers]


def test_the_persons_words_stay_text_in_place_and_the_rest_goes_on_pages(sample):
    mem = Memory(vision="anthropic", budget=Budget(tokens=12_000), keep_recent=4, words=True)
    for m in sample[:200]:
        mem.add(m)
    ctx = mem.context()
    assert ctx.pages, "the session is long enough for pages"
    said = [t for t in mem.transcript() if t.role == "user"]
    texts = {s.turn.id: s.text for s in ctx.text_segments if s.turn is not None}
    on_pages = {t for p in ctx.pages for t in p.page.turn_ids}
    for t in said:  # every message of the person's: as sent, as text; on a page, its place only
        assert texts[t.id] == t.text
        if t.id in on_pages:
            assert _drawn(ctx, t.id) == [f"#{t.id} USER{IN_PLACE}"]
    assert any(t.id in on_pages for t in said), "some of them are where pages are"
    assert not any(t.text[:25] in p.text for t in said for p in ctx.pages)
    assert any(tool.text[:60] in p.text for p in ctx.pages for tool in mem.transcript() if tool.role == "tool")
    # the exporters keep them where they were: between the images of the pages around them
    system, messages = ctx.to_anthropic()
    flat = [b for m in messages for b in m["content"]]
    at = -1
    for t in said:  # each found after the one before it (some are said twice)
        at = next(i for i in range(at + 1, len(flat)) if flat[i].get("text") == t.text)
    assert any(b["type"] == "image" for b in flat[:at])


def test_off_by_default_in_the_library(sample):
    mem = Memory(vision="anthropic", budget=Budget(tokens=12_000), keep_recent=4)
    for m in sample[:200]:
        mem.add(m)
    ctx = mem.context()
    assert any(t.text[:25] in p.text for t in mem.transcript() if t.role == "user" for p in ctx.pages)


def _chat(budget: int) -> Memory:
    mem = Memory(budget=Budget(tokens=budget), keep_recent=2, words=True, verbatim=False)
    for i in range(30):
        mem.add({"role": "user", "content": f"please do step {i} carefully " * 5})
        mem.add({"role": "assistant", "content": f"done with step {i}: " + "result " * 60})
    return mem


@pytest.mark.parametrize("budget", [400, 700, 900])
def test_a_hard_budget_that_cannot_hold_them_leaves_out_the_oldest_and_says_so(budget):
    mem = _chat(budget)
    ctx = mem.context()
    assert ctx.tokens <= budget
    users = [t.id for t in mem.transcript() if t.role == "user"]
    kept = [s.turn.id for s in ctx.text_segments if s.turn is not None and s.turn.role == "user"]
    gone = users[: len(users) - len(kept)]
    assert gone and kept == users[len(gone):], "the oldest gave way, the newest stayed"
    [caption] = [s.text for s in ctx.text_segments if s.kind == "caption"]
    assert f"The person's {len(gone)} earliest messages (turns #{gone[0]} to #{gone[-1]})" in caption
    assert all(not re.search(rf"please do step {i} ", p.text) for p in ctx.pages for i in range(30))


def test_with_room_for_them_none_gives_way():
    ctx = _chat(1200).context()
    assert not any("earliest messages" in s.text for s in ctx.text_segments)
    assert sum(1 for s in ctx.text_segments if s.turn is not None and s.turn.role == "user") == 30


@pytest.mark.parametrize(("text", "stays"), [
    ("Tidy up calc.py in this folder.", True),
    (CLAUDE_MD, True),  # the instruction file alone: what Claude Code forwards from CLAUDE.md
    (CLAUDE_MD + "\nTidy up calc.py.", True),
    (AGENTS_MD, True),
    (AGENTS_MD + "\n" + ENVIRONMENT, True),
    (REMINDER_ONLY, False),  # what an agent wraps around nothing of the person's
    (ENVIRONMENT, False),
])
def test_what_a_client_wraps_is_not_the_persons_words_but_its_instruction_files_are(text, stays):
    mem = Memory(budget=Budget(tokens=600), keep_recent=1, words=True, verbatim=False)
    mem.add({"role": "assistant", "content": "started " * 40})
    turn = mem.add({"role": "user", "content": text})
    for i in range(12):
        mem.add({"role": "assistant", "content": f"working on part {i}: " + "detail " * 40})
    ctx = mem.context()
    assert turn.id in {t for p in ctx.pages for t in p.page.turn_ids}
    assert (_drawn(ctx, turn.id) == [f"#{turn.id} USER{IN_PLACE}"]) is stays


def test_the_marking_is_stored_with_the_turn_so_a_reopen_draws_the_same_pages(tmp_path, sample):
    path = tmp_path / "m.db"
    with Memory(store=path, vision="anthropic", budget=Budget(tokens=12_000), keep_recent=4, words=True) as mem:
        for m in sample[:200]:
            mem.add(m)
        digests = [p.digest for p in mem.pages]
    with Memory.open(path) as again:  # opened without saying words=True
        assert [p.digest for p in again.pages] == digests


def test_through_the_proxy_every_message_of_the_persons_reaches_the_upstream_as_text(upstream, sample):
    """On by default for a client that gives its model tools (its tool output comes as tool
    results); off with --no-words, and for a client with no tools, which may send anything as a
    user message (SWE-agent sends its commands' output so)."""
    pytest.importorskip("anthropic")
    import anthropic

    from optictx.serve import ServeConfig

    from serve_peers import Proxy, to_anthropic_messages

    system, messages = to_anthropic_messages(sample[:120])
    names = sorted({c["function"]["name"] for m in sample[:120] for c in m.get("tool_calls") or []})
    tools = [{"name": n, "description": f"the agent's {n}", "input_schema": {"type": "object"}} for n in names]
    said = [m["content"] for m in sample[:120] if m["role"] == "user"]
    for words, given in ((True, tools), (False, tools), (True, None)):
        proxy = Proxy(ServeConfig(anthropic_upstream=upstream.anthropic_url, budget=6000, keep_recent=4,
                                  words=words))
        try:
            client = anthropic.Anthropic(base_url=proxy.url, api_key="key-a", max_retries=0)
            client.messages.create(model="claude-sonnet-4-5", max_tokens=100, system=system, messages=messages,
                                   **({"tools": given} if given else {}))
        finally:
            proxy.stop()
        body = upstream.last("/v1/messages").body
        blocks = [b for m in body["messages"] for b in m["content"]]
        texts = [b["text"] for b in blocks if b["type"] == "text"]
        assert any(b["type"] == "image" for b in blocks), "old turns went as pages"
        if words and given:  # each as the client sent it, in its order
            at = -1
            for s in said:
                at = texts.index(s, at + 1)
        else:
            assert not all(s in texts for s in said)
