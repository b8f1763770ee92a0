"""Turns that stay text in place: a system message after the conversation began (a client's
mid-conversation instruction or reminder) and a turn marked to go as it came are never drawn on a
page; they sit between the pages where they were, and a new one does not move the prompt's front."""

from __future__ import annotations

from optictx import Budget, Memory
from optictx.blocks import IN_PLACE
from optictx.turnindex import AS_SENT

REMINDER = "Reminder: the task tools have not been used recently; keep the todo list current."


def _session(sample, at: dict[int, dict]):
    """The sample conversation with extra turns inserted before the sample's turn i."""
    out = []
    for i, m in enumerate(sample[:160]):
        if i in at:
            out.append(at[i])
        out.append(m)
    return out


def _memory():
    return Memory(vision="anthropic", budget=Budget(tokens=12_000), keep_recent=4)


def test_a_system_turn_in_the_conversation_stays_text_between_the_pages_that_hold_its_neighbours(sample):
    mem = _memory()
    for m in _session(sample, {60: {"role": "system", "content": REMINDER}}):
        mem.add(m)
    ctx = mem.context()
    assert ctx.pages, "the session is long enough for pages"
    reminder = next(t for t in mem.transcript() if t.text == REMINDER)
    at = [i for i, s in enumerate(ctx.segments) if getattr(s, "turn", None) == reminder]
    assert len(at) == 1 and ctx.segments[at[0]].kind == "inline"
    drawn = [e.line.text for p in ctx.pages for e in p.page.entries if e.turn_id == reminder.id and e.covers]
    assert drawn == [f"#{reminder.id} SYSTEM{IN_PLACE}"]  # its place on the page, not its words
    assert not any(REMINDER in p.text for p in ctx.pages)
    before = [s for s in ctx.segments[: at[0]] if hasattr(s, "page")]
    after = [s for s in ctx.segments[at[0]:] if hasattr(s, "page")]
    assert before and reminder.id in before[-1].page.turn_ids  # right after the page that shows its line
    assert all(min(s.page.turn_ids) > reminder.id for s in after)
    # every exporter writes it at that place, as text
    openai = ctx.to_openai()
    n = next(i for i, m in enumerate(openai) if m.get("content") == REMINDER)
    assert openai[n]["role"] == "system" and any(isinstance(m["content"], list) for m in openai[:n])
    system, messages = ctx.to_anthropic()
    assert REMINDER not in str(system)
    texts = [b.get("text") for m in messages for b in m["content"]]
    assert REMINDER in texts and texts.index(REMINDER) > next(
        i for i, b in enumerate(b for m in messages for b in m["content"]) if b["type"] == "image")


def test_a_new_reminder_is_appended_not_a_change_of_the_front(sample):
    mem = _memory()
    events = []
    for m in sample[:200]:  # an agent loop: a context after every turn
        mem.add(m)
        events.append(mem.context().event)
    before = mem.context()
    assert before.pages and {"first", "forced", "paid"} & set(events)
    mem.add({"role": "system", "content": REMINDER})
    after = mem.context()
    assert after.event == "append"
    assert [p.key for p in after.pieces[: len(before.pieces)]] == [p.key for p in before.pieces]
    assert after.pieces[-1].turn.text == REMINDER and after.pieces[-1].role == "system"


def test_a_turn_marked_as_sent_is_never_drawn(sample):
    mem = _memory()
    odd = {"role": "user", "content": [{"type": "text", "text": "see the attachment"},
                                       {"type": "mystery_block", "payload": "x" * 40}],
           "metadata": {AS_SENT: "messages[61].content[1].type"}}
    for m in _session(sample, {60: odd}):
        mem.add(m)
    ctx = mem.context()
    kept = next(t for t in mem.transcript() if AS_SENT in t.metadata)
    assert [s.kind for s in ctx.segments if getattr(s, "turn", None) == kept] == ["inline"]
    assert all(e.line.text == f"#{kept.id} USER{IN_PLACE}" for p in ctx.pages for e in p.page.entries
               if e.turn_id == kept.id and e.covers)
    assert not any("see the attachment" in p.text for p in ctx.pages)


def test_leading_system_turns_are_still_the_front(sample):
    mem = _memory()
    mem.add({"role": "system", "content": "You are a careful agent."})
    for m in sample[1:150]:
        mem.add(m)
    ctx = mem.context()
    assert ctx.segments[0].kind == "system" and ctx.segments[0].text == "You are a careful agent."
    system, _ = ctx.to_anthropic()
    assert system == "You are a careful agent."
