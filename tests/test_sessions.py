"""Recorded sessions as `optictx bill` reads them: every file it is given is checked where it is
read, and a bad one is one line naming the file, the line and the field, never a traceback, a
hang or a read of the whole file into memory."""

from __future__ import annotations

import json
import os

import pytest

from optictx import io
from optictx.cli import main
from optictx.errors import ConversationFileError
from optictx.eval.sessions import load_session

MESSAGES = [{"role": "user", "content": "count"}, {"role": "assistant", "content": "1"},
            {"role": "user", "content": "more"}, {"role": "assistant", "content": "2"}]
CALL = {"message": 1, "input_tokens": 5, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 10}


def _session(tmp_path, sidecar) -> str:
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in MESSAGES))
    (tmp_path / "s.usage.json").write_text(sidecar if isinstance(sidecar, str) else json.dumps(sidecar))
    return str(path)


@pytest.mark.parametrize("sidecar, field", [
    ({}, "calls"), ([], "the file"), ({"calls": []}, "calls"), ({"calls": [5]}, "calls[0]"),
    ({"calls": [{**CALL, "message": -1}]}, "calls[0].message"), ({"calls": [{**CALL, "message": 10**9}]}, "message"),
    ({"calls": [{**CALL, "input_tokens": True}]}, "calls[0].input_tokens"),
    ({"calls": [{**CALL, "cache_read_input_tokens": -3}]}, "cache_read_input_tokens"),
    ('{"calls": [{"message": 1, "input_tokens": 1' + "0" * 400 + "}]}", "input_tokens"),
    ({"calls": [{**CALL, "message": 3}, CALL]}, "calls[1].message"), ("{not json", "not JSON"),
])
def test_a_sidecar_of_the_wrong_shape_is_an_error_naming_its_field(tmp_path, capsys, sidecar, field):
    path = _session(tmp_path, sidecar)
    with pytest.raises(ConversationFileError, match="s.usage.json") as err:
        load_session(path)
    assert field in str(err.value)
    assert main(["bill", path]) == 2
    out = capsys.readouterr()
    assert "Traceback" not in out.err and field in out.err and out.err.count("\n") == 1


def test_what_is_not_a_regular_file_is_refused_without_reading_it(tmp_path, capsys):
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)  # opening it for reading would block until a writer came
    zero = tmp_path / "zero.jsonl"
    zero.symlink_to("/dev/zero")  # reading it would never end
    for path in (fifo, zero):
        assert main(["bill", str(path)]) == 2
        assert "not a regular file" in capsys.readouterr().err


def test_a_line_longer_than_the_bound_is_an_error_not_a_read(tmp_path, monkeypatch):
    monkeypatch.setattr(io, "MAX_LINE", 1000)
    path = tmp_path / "long.jsonl"
    path.write_text(json.dumps({"role": "user", "content": "x" * 5000}) + "\n")
    with pytest.raises(ConversationFileError, match="long.jsonl:1: a line longer than 1000 bytes"):
        load_session(path)


@pytest.mark.parametrize("record, field", [
    ({"type": "assistant", "sessionId": "s", "message": {"role": "assistant", "content": [], "usage": 5}},
     "message.usage"),
    ({"type": "assistant", "sessionId": "s", "message": {"role": "assistant", "content": [], "id": "m",
                                                         "usage": {"input_tokens": -1}}}, "input_tokens"),
    ({"type": "user", "sessionId": "s", "message": {"role": "user", "content": 7}}, "message.content"),
    ({"type": "user", "sessionId": "s", "message": {"role": "wizard", "content": "x"}}, "message.role"),
])
def test_a_claude_code_transcript_record_of_the_wrong_shape_names_its_line_and_field(tmp_path, record, field):
    path = tmp_path / "t.jsonl"
    good = {"type": "user", "sessionId": "s", "message": {"role": "user", "content": "hi"}}
    path.write_text(json.dumps(good) + "\n" + json.dumps(record) + "\n")
    with pytest.raises(ConversationFileError, match=r"t\.jsonl, line 2: ") as err:
        load_session(path)
    assert field in str(err.value)


def test_a_codex_rollout_that_reports_more_cached_than_its_prompt_is_refused(tmp_path):
    path = tmp_path / "rollout.jsonl"
    records = [{"type": "session_meta", "payload": {"base_instructions": {"text": "be careful"}}},
               {"type": "response_item", "payload": {"type": "message", "role": "user",
                                                     "content": [{"type": "input_text", "text": "go"}]}},
               {"type": "token_usage_record", "payload": {"usage": {"input_tokens": 10, "cached_input_tokens": 11}}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(ConversationFileError, match="line 3: payload.usage.cached_input_tokens"):
        load_session(path)


def _rollout(path, provider: str, text: str = "go") -> None:
    records = [{"type": "session_meta", "payload": {"model_provider": provider, "base_instructions": {"text": "be"}}},
               {"type": "turn_context", "payload": {"model": "gpt-5"}},
               {"type": "response_item", "payload": {"type": "message", "role": "user",
                                                     "content": [{"type": "input_text", "text": text}]}},
               {"type": "response_item", "payload": {"type": "message", "role": "assistant",
                                                     "content": [{"type": "output_text", "text": "ok"}]}},
               {"type": "token_usage_record", "payload": {"usage": {"input_tokens": 1500, "cached_input_tokens": 0}}}]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_a_client_s_whole_store_is_walked_newest_first_and_since_a_day(tmp_path, capsys):
    """`optictx bill ~/.codex/sessions` (or `~/.claude/projects`): every session under it, the
    newest first; `--since` leaves out those last written before; a file there that is no
    session is skipped, where one named is an error."""
    from optictx.eval.sessions import session_files

    root = tmp_path / "sessions"
    old, new = root / "2026" / "11" / "02" / "rollout-a.jsonl", root / "2026" / "12" / "06" / "rollout-b.jsonl"
    _rollout(old, "openai")
    _rollout(new, "openai")
    os.utime(old, (1_700_000_000, 1_700_000_000))
    (root / "notes.jsonl").write_text("not a session\n")
    os.utime(root / "notes.jsonl", (1_600_000_000, 1_600_000_000))
    assert session_files(root) == [new, old, root / "notes.jsonl"]
    assert main(["bill", str(root), "--json"]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [o.get("session") for o in out[:-1]] == ["rollout-b", "rollout-a"] and out[-1]["sessions"] == 2
    assert main(["bill", str(root), "--since", "2026-01-01", "--json"]) == 0
    assert [json.loads(line).get("session") for line in capsys.readouterr().out.splitlines()][:-1] == ["rollout-b"]
    assert main(["bill", str(root / "notes.jsonl")]) == 2
    with pytest.raises(SystemExit):
        main(["bill", str(root), "--since", "nonsense"])
    assert "a date (2026-12-01) or days back (7d)" in capsys.readouterr().err


@pytest.mark.parametrize(("provider", "flag", "through"), [("optictx", "auto", True), ("openai", "auto", False),
                                                           ("openai", "yes", True), ("optictx", "no", False)])
def test_a_session_that_went_through_optictx_has_its_bill_said_so(tmp_path, capsys, provider, flag, through):
    """What the provider billed a session that went through the proxy was optictx's requests:
    said as "billed through optictx", never "as it came"."""
    path = tmp_path / "rollout.jsonl"
    _rollout(path, provider)
    assert main(["bill", str(path), "--proxied", flag]) == 0
    out = capsys.readouterr().out
    assert ("billed through optictx" in out) == through and ("billed as it came" in out) == (not through)


@pytest.mark.parametrize(("shape", "field"), [({"system": [5, None]}, "shape.system"),
                                              ({"system": [{"type": "text", "text": 5}]}, "shape.system"),
                                              ({"tools": "all of them"}, "shape.tools")])
def test_a_request_shape_of_the_wrong_kind_is_an_error_naming_it(tmp_path, capsys, shape, field):
    """A transcript's recorded request whose system prompt or tools are not lists of objects is
    an error naming the field, never a TypeError traceback."""
    path = tmp_path / "t.jsonl"
    records = [{"type": "user", "sessionId": "s", "message": {"role": "user", "content": "hi"}},
               {"type": "api-request-shape", "shape": shape},
               {"type": "assistant", "sessionId": "s", "message": {"id": "m", "role": "assistant", "content": "ok",
                                                                   "usage": {"input_tokens": 3}}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["bill", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and field in err and "line 2" in err


def test_a_usage_no_window_holds_asks_no_stand_in_beyond_one(tmp_path):
    """Every usage field at 10^9 asked a stand-in of 3x10^9 tokens (MemoryError): a stand-in is
    at most what a window holds."""
    from optictx.eval.requests import MAX_STAND_IN, filler
    from optictx.tokens import get_tokenizer

    path = tmp_path / "t.jsonl"
    usage = {"input_tokens": 10**9, "cache_read_input_tokens": 10**9, "cache_creation_input_tokens": 10**9}
    records = [{"type": "user", "sessionId": "s", "message": {"role": "user", "content": "hi"}},
               {"type": "assistant", "sessionId": "s", "message": {"id": "m", "role": "assistant", "content": "ok",
                                                                   "usage": usage}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    session = load_session(path)
    assert session.system_tokens > MAX_STAND_IN
    assert get_tokenizer().count(filler(session.system_tokens)) <= MAX_STAND_IN


def test_a_transcript_s_one_hour_writes_are_billed_at_the_one_hour_price(tmp_path):
    """Claude Code records its writes by lifetime (`cache_creation.ephemeral_1h_input_tokens`):
    Anthropic bills a 1-hour write at 2x the input price, a 5-minute one at 1.25x, a read at 0.1x
    (its prompt-caching page); an unreadable split is an error naming the field."""
    from optictx.eval.bill import billed
    from optictx.promptcache import CACHE_PRICING

    usage = {"input_tokens": 10, "cache_read_input_tokens": 400, "cache_creation_input_tokens": 1000,
             "cache_creation": {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 700}}
    records = [{"type": "user", "sessionId": "s", "message": {"role": "user", "content": "hi"}},
               {"type": "assistant", "sessionId": "s", "message": {"id": "m", "role": "assistant", "content": "ok",
                                                                   "usage": usage}}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert billed(load_session(path).billed, CACHE_PRICING["anthropic"]) == pytest.approx(
        10 + 0.1 * 400 + 1.25 * 300 + 2.0 * 700)
    usage["cache_creation"]["ephemeral_1h_input_tokens"] = "lots"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(ConversationFileError, match="ephemeral_1h_input_tokens"):
        load_session(path)
