import json
import re
import subprocess
import sys
from pathlib import Path

from optictx.cli import main
from optictx.io import read_jsonl, write_jsonl
from optictx.sample import sample_conversation

ROOT = Path(__file__).resolve().parents[1]


def test_committed_sample_is_a_well_formed_agent_session_and_its_generators():
    """The committed file is what the generator makes (not stale), and, checked on its own
    terms, a session an API would take: every tool result answers a call made just before it,
    every call is answered, one system prompt first, and the traffic of an agent (tool results,
    code, ids) rather than prose alone."""
    committed = [json.loads(line) for line in (ROOT / "examples/sample_agent.jsonl").read_text().splitlines()]
    assert committed == sample_conversation()
    assert committed[0]["role"] == "system" and all(m["role"] != "system" for m in committed[1:])
    open_calls: set[str] = set()
    for m in committed:
        if m["role"] == "tool":
            assert m["tool_call_id"] in open_calls, m["tool_call_id"]
            open_calls.discard(m["tool_call_id"])
        else:
            assert not open_calls, "a call left unanswered before the next message"
            open_calls = {c["id"] for c in m.get("tool_calls") or []}
            for c in m.get("tool_calls") or []:
                assert isinstance(json.loads(c["function"]["arguments"]), dict)  # arguments an API takes
    assert len(committed) >= 300 and sum(1 for m in committed if m["role"] == "tool") >= 100
    text = "\n".join(str(m.get("content")) for m in committed)
    assert "```" in text and "def " in text and re.search(r"\b[0-9a-f]{12}\b", text)


def test_demo_writes_pages_plan_and_contact_sheet(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "optictx demo:" in out and "x smaller" in out
    # The README prints this very line: it must be what the demo prints today.
    assert out.splitlines()[0] in (ROOT / "README.md").read_text(), out.splitlines()[0]
    assert (tmp_path / "contact_sheet.png").stat().st_size > 10_000
    assert list((tmp_path / "pages").glob("page_*_*.png"))
    plan = (tmp_path / "plan.md").read_text()
    assert "| turn | role | placed | tokens |" in plan and "tiny" in plan


def test_plan_prints_every_turn(tmp_path, capsys):
    f = tmp_path / "c.jsonl"
    write_jsonl(f, sample_conversation(tasks=3))
    assert main(["plan", str(f), "--budget", "3000", "--vision", "anthropic"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n| ") >= len(read_jsonl(f))
    assert "under `anthropic`" in out


def test_render_writes_every_page_with_its_text(tmp_path):
    f = tmp_path / "c.jsonl"
    write_jsonl(f, sample_conversation(tasks=2))
    assert main(["render", str(f), "--out", str(tmp_path / "r")]) == 0
    index = json.loads((tmp_path / "r/pages.json").read_text())
    assert index and all((tmp_path / "r" / p["file"]).is_file() for p in index)


def test_malformed_jsonl_names_the_line(tmp_path, capsys):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"role": "user", "content": "ok"}\n{"role": "user", "content": \n')
    assert main(["plan", str(f)]) == 2
    assert "bad.jsonl:2: not valid JSON" in capsys.readouterr().err
    f.write_text('{"role": "wizard", "content": "x"}\n')
    assert main(["plan", str(f)]) == 2
    assert "bad.jsonl:1: not a valid message" in capsys.readouterr().err


def test_missing_file_is_a_clear_error(tmp_path, capsys):
    assert main(["plan", str(tmp_path / "nope.jsonl")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_python_dash_m_entry_point():
    out = subprocess.run([sys.executable, "-m", "optictx", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "demo" in out.stdout


def test_bill_prices_a_recorded_session_both_ways(tmp_path, capsys):
    import pytest

    pytest.importorskip("starlette", reason="optictx bill replays through the proxy (the serve extra)")
    f = tmp_path / "session.jsonl"
    write_jsonl(f, sample_conversation())
    assert main(["bill", str(f), "--provider", "anthropic", "openai:gpt-4o", "--json", "--requests"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    sessions = [x for x in lines if "session" in x]
    totals = [x for x in lines if "sessions" in x]
    assert [s["provider"] for s in sessions] == ["anthropic", "openai:gpt-4o"]
    msgs = sample_conversation()
    calls = sum(1 for i, m in enumerate(msgs) if m["role"] == "assistant" and msgs[i - 1]["role"] != "assistant")
    assert all(s["requests"] == calls == len(s["rows"]) for s in sessions)
    # A long session: optictx sends fewer tokens and, cache reads counted, costs less.
    assert all(t["ratio"] < 1.0 and t["sessions_above_1"] == 0 for t in totals)
    assert all(s["optictx_tokens"] < s["passthrough_tokens"] for s in sessions)
    assert main(["bill", str(tmp_path / "none")]) == 2


def test_bill_with_pauses_prices_a_cold_cache_and_compacts_on_it(tmp_path, capsys):
    """`--gap-seconds 60,60,60,900`: a pause every fourth request. After a pause the cache is
    cold both ways; the plan compacts there (it writes the whole prompt anyway), so pauses cost
    pass-through more than they cost optictx."""
    import pytest

    pytest.importorskip("starlette", reason="optictx bill replays through the proxy (the serve extra)")
    f = tmp_path / "session.jsonl"
    write_jsonl(f, sample_conversation())
    runs = []
    for gaps in ("60", "60,60,60,900"):
        assert main(["bill", str(f), "--json", "--requests", "--gap-seconds", gaps]) == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        runs.append((next(x for x in lines if "rows" in x), next(x for x in lines if "sessions" in x)))
    (_, steady), (paused_rows, paused) = runs
    assert paused["passthrough_cost"] > steady["passthrough_cost"]  # pauses write the cache again
    assert paused["ratio"] < steady["ratio"]
    after_pause = [r["event"] for r in paused_rows["rows"] if r["request"] % 4 == 3]
    assert "paid" in after_pause
    with pytest.raises(SystemExit):  # argparse's usage error, exit 2
        main(["bill", str(f), "--gap-seconds", "60,soon"])


def test_bill_with_risk_0_costs_no_more_than_as_it_came(tmp_path, capsys):
    """`--risk 0` (the proxy's `--risk`): requests 60 s apart never pause, so nothing compacts and
    the session costs what it did as it came; a bad share is a usage error."""
    import pytest

    pytest.importorskip("starlette", reason="optictx bill replays through the proxy (the serve extra)")
    f = tmp_path / "session.jsonl"
    write_jsonl(f, sample_conversation())
    assert main(["bill", str(f), "--json", "--risk", "0"]) == 0
    total = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert total["ratio"] <= 1.0 and total["sessions_above_1"] == 0 and "paid" not in total["events"]
    for bad in ("-1", "nan", "some"):
        with pytest.raises(SystemExit):
            main(["bill", str(f), "--risk", bad])


def test_bill_of_a_session_with_no_request_says_so(tmp_path, capsys):
    import pytest

    pytest.importorskip("starlette", reason="optictx bill replays through the proxy (the serve extra)")
    f = tmp_path / "session.jsonl"
    write_jsonl(f, [{"role": "system", "content": "You help."}, {"role": "user", "content": "Hello?"}])
    assert main(["bill", str(f)]) == 0
    out = capsys.readouterr().out
    assert "0 requests: no request to price" in out and "None" not in out
