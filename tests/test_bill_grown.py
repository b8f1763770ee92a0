"""`optictx bill` builds each request from the one before and hands the proxy only its new turns
(`eval/requests.py`, `eval/grown.py`, `Proxy.grow`). The oracle is the wire: every request
written whole as bytes and read the way `optictx serve` reads it (`replay(wire=True)`), and the
requests as the export writes a conversation whole."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("starlette", reason="optictx bill replays through the proxy (the serve extra)")

from optictx.eval.bill import replay
from optictx.eval.requests import Requests
from optictx.eval.sessions import load_session
from optictx.export import _anthropic_message, _merge_roles
from optictx.sample import sample_conversation
from optictx.turns import to_turn


def _odd(messages: list[dict]) -> list[dict]:
    """A session a client could send: a system message halfway (Anthropic's system prompt
    changes), two user messages in a row (merged into one Anthropic message) and a message
    that is not an API's (kept as it came)."""
    half = len(messages) // 2
    odd = [*messages[:half], {"role": "system", "content": "Halfway: keep answers short."},
           {"role": "user", "content": "One more thing."}, {"role": "user", "content": "And another."},
           *messages[half:]]
    return odd


def _session(tmp_path, messages: list[dict], name: str):
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in messages))
    return load_session(path)


@pytest.mark.parametrize("provider", ["anthropic", "openai:gpt-5"])
def test_a_bill_grown_request_by_request_is_the_bill_the_wire_gives(tmp_path, provider):
    for name, messages in (("plain", sample_conversation(tasks=6)), ("odd", _odd(sample_conversation(tasks=6)))):
        session = _session(tmp_path, messages, name)
        for budget in (None, 4000):  # as it came, then compacted on the way
            grown = replay(session, provider, budget=budget)
            wire = replay(session, provider, budget=budget, wire=True)
            assert grown.rows == wire.rows, (name, budget)
            assert len(grown.rows) == len(session.calls)
    assert any(r.event not in ("verbatim", "-") for r in grown.rows)  # the small budget compacted


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_each_request_grown_is_the_request_written_whole(tmp_path, api):
    messages = _odd(sample_conversation(tasks=4))
    session = _session(tmp_path, messages, "odd")
    requests = Requests(session, api, "m")
    for k, n in enumerate(session.calls):
        requests.to(k)
        head = messages[:n]
        if api == "openai":
            assert requests.body() == {"model": "m", "messages": head}
            continue
        merged = _merge_roles([_anthropic_message(to_turn(m)) for m in head if m["role"] != "system"])
        last = merged[-1]
        merged[-1] = {**last, "content": [*last["content"][:-1], {**last["content"][-1],
                                                                  "cache_control": {"type": "ephemeral"}}]}
        assert requests.body()["messages"] == merged
        system = "\n\n".join(m["content"] for m in head if m["role"] == "system")
        assert requests.body()["system"][0]["text"] == system


def test_a_long_session_is_read_once_not_once_per_request(tmp_path, monkeypatch):
    """The dialect reads each message a bounded number of times, however many requests carry it
    (read whole, the 128 requests of this session would make it read each message 64 times)."""
    from optictx.serve.anthropic_api import ANTHROPIC

    messages = sample_conversation(tasks=16)
    session = _session(tmp_path, messages, "long")
    read: list[int] = []
    parse = ANTHROPIC.parse
    monkeypatch.setattr(ANTHROPIC, "parse", lambda body, raw: read.append(len(body["messages"])) or parse(body, raw))
    ticks: list[int] = []
    bill = replay(session, "anthropic", budget=6000, done=lambda: ticks.append(1))  # `optictx bill`'s bar
    assert len(bill.rows) == len(session.calls) == len(ticks) > 100
    assert sum(read) <= 6 * len(messages)


def test_a_grown_request_for_a_conversation_holding_other_turns_is_refused_by_name():
    """`Proxy.grow` trusts its caller for which turns are new, never for which memory holds the
    rest: a conversation not open, or holding another count of turns, is an error naming it."""
    from optictx.errors import OptictxError
    from optictx.serve.anthropic_api import ANTHROPIC
    from optictx.serve.config import ServeConfig
    from optictx.serve.dialect import Parsed
    from optictx.serve.proxy import Proxy

    proxy = Proxy(ServeConfig.make(upstream="http://127.0.0.1:9/v1", anthropic_upstream="http://127.0.0.1:9",
                                   tenancy="per-key"))
    try:
        body = {"model": "claude-opus-4-5", "max_tokens": 10, "messages": [
            {"role": "user", "content": "Fix the flaky test."}, {"role": "assistant", "content": "On it."},
            {"role": "user", "content": "Thanks."}]}
        whole = ANTHROPIC.parse(body, json.dumps(body).encode())
        fitted = proxy.fit(ANTHROPIC, whole, {"x-api-key": "k"}, at=1.0)
        conversation = fitted.sent.conversation
        grown = Parsed.grown({k: v for k, v in body.items() if k != "messages"}, whole.turns, whole.originals, (), None)
        with pytest.raises(OptictxError, match=f"conversation {conversation} holds 3 turns, not 2"):
            proxy.grow(conversation, ANTHROPIC, grown, 2, {"x-api-key": "k"}, at=2.0)
        with pytest.raises(OptictxError, match="conversation nowhere is not open here"):
            proxy.grow("nowhere", ANTHROPIC, grown, 3, {"x-api-key": "k"}, at=2.0)
        with pytest.raises(OptictxError, match="is not open here"):  # another tenant's is not found
            proxy.grow(conversation, ANTHROPIC, grown, 3, {"x-api-key": "other"}, at=2.0)
        again = proxy.grow(conversation, ANTHROPIC, grown, 3, {"x-api-key": "k"}, at=2.0)
        assert again.sent.conversation == conversation and again.context is not None
    finally:
        proxy.close()


def test_a_grown_view_reads_as_the_tuple_it_stands_for():
    from optictx.eval.grown import Grown

    items = list(range(10))
    view, same = Grown(items, 7), tuple(items[:7])
    for cut in (slice(None), slice(2, 5), slice(-3, None), slice(None, None, -1), slice(5, 1, -2), slice(-10, 3)):
        assert view[cut] == same[cut]
    assert [view[i] for i in range(-7, 7)] == [same[i] for i in range(-7, 7)]
    with pytest.raises(IndexError):
        view[7]
    items.append(99)  # the list grows on: the view still stands for its first 7
    assert len(view) == 7 and tuple(view) == same


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_a_stand_in_system_prompt_goes_when_the_session_s_own_comes(tmp_path, api):
    """A session whose sidecar says the calls carried a system prompt that was not recorded gets
    a stand-in of that size until a system message of its own comes (then the stand-in goes, and
    the request is built whole)."""
    from optictx.eval.requests import filler

    messages = [{"role": "user", "content": "count"}, {"role": "assistant", "content": "1"},
                {"role": "system", "content": "Count in words."}, {"role": "user", "content": "more"},
                {"role": "assistant", "content": "two"}, {"role": "user", "content": "more"},
                {"role": "assistant", "content": "three"}]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in messages))
    calls = [{"message": i, "input_tokens": 10, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 2000}
             for i in (1, 4, 6)]
    (tmp_path / "s.usage.json").write_text(json.dumps({"calls": calls}))
    session = load_session(path)
    assert session.system_tokens == 2000
    requests, grown = Requests(session, api, "m"), []
    for k, n in enumerate(session.calls):
        grown.append(requests.to(k))
        head = messages[:n]
        own = [m["content"] for m in head if m["role"] == "system"]
        if api == "openai":
            stand_in = [] if own else [{"role": "system", "content": filler(2000)}]
            assert requests.body()["messages"] == [*stand_in, *head]
        else:
            assert requests.body()["system"][0]["text"] == ("\n\n".join(own) or filler(2000))
    # The stand-in goes at the second (the system prompt changes with it); the third is the second
    # grown, from its last item (Anthropic: the merged messages are fewer).
    assert grown == [None, None, 3 if api == "openai" else 2]
