"""The real Claude Code CLI (`@anthropic-ai/claude-code` from the npm registry; `make test`
installs it under build/claude) on its default model, through `optictx serve`, against a small
real upstream on 127.0.0.1 that speaks the Messages API and asks for tool calls (Bash, Read,
Grep, Edit): Claude Code runs them and sends their results back, so one `claude -p` makes a
session of many requests, as a user's would."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import _tesseract_missing, needs

pytestmark = [needs("starlette", "serve"), needs("uvicorn", "serve"), needs("httpx", "serve")]

from optictx.handles import ALPHABET, LENGTH  # noqa: E402
from optictx.serve import ServeConfig  # noqa: E402
from optictx.serve.conversations import tenant_of  # noqa: E402

from serve_peers import Proxy, Tap, start_upstream, stop_upstream  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TASK = "Tidy up calc.py in this folder and check the numbers."
BUDGET = 40_000  # tokens: Claude Code's tools and system prompt take about 11k of it; pages come late


def claude() -> str | None:
    """The Claude Code CLI to test with: $OPTICTX_CLAUDE, one on PATH, or the one `make claude`
    installs under build/claude."""
    found = os.environ.get("OPTICTX_CLAUDE") or shutil.which("claude")
    local = ROOT / "build" / "claude" / "node_modules" / ".bin" / "claude"
    return found or (str(local) if local.exists() else None)


def _workspace(path: Path) -> Path:
    path.mkdir()
    (path / "calc.py").write_text("".join(
        f"def step_{i}(a, b):\n    \"\"\"Step {i} of the pipeline.\"\"\"\n    return a * {i} + b\n\n\n"
        for i in range(40)))
    (path / "notes.txt").write_text("".join(f"note {i}: the value of step {i} is {i * 7}\n" for i in range(200)))
    return path


def script(work: Path) -> list[tuple[str, dict]]:
    """The tool calls the upstream asks for, in order: shell commands, reads, searches and edits."""
    calc, notes = str(work / "calc.py"), str(work / "notes.txt")
    calls: list[tuple[str, dict]] = [("Read", {"file_path": calc})]
    for k in range(8):
        calls += [("Bash", {"command": f"seq {k * 1000} {k * 1000 + 900}", "description": f"count block {k}"}),
                  ("Grep", {"pattern": f"step_{k}", "path": str(work), "output_mode": "content", "-n": True}),
                  ("Read", {"file_path": notes, "offset": k * 20 + 1, "limit": 60})]
    calls += [("Edit", {"file_path": calc, "old_string": f"    return a * {i} + b\n",
                        "new_string": f"    return a * {i} - b\n"}) for i in (3, 5, 7)]
    calls += [("Bash", {"command": "grep -c ' - b' calc.py", "description": "count the edits"}),
              ("Read", {"file_path": calc, "offset": 1, "limit": 30})]
    return calls


def run_claude(binary: str, proxy_url: str, work: Path, home: Path, *extra: str,
               tools: str = "Bash,Read,Grep,Edit,Write,Glob") -> subprocess.CompletedProcess:
    """`claude -p TASK` as a new user runs it: its default model, no settings of its own."""
    env = {**os.environ, "HOME": str(home), "ANTHROPIC_BASE_URL": proxy_url, "ANTHROPIC_API_KEY": "sk-ant-test",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"}
    env.pop("ANTHROPIC_MODEL", None)
    return subprocess.run([binary, "-p", TASK, "--allowedTools", tools,
                           "--permission-mode", "acceptEdits", "--output-format", "json", *extra],
                          env=env, cwd=work, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


def _tokens(messages: list[dict]) -> list[str]:
    """A request's messages as comparable pieces: a system message whole, any other message's
    blocks one by one (the proxy merges messages of one role, never changes a block it keeps)."""
    out = []
    for m in messages:
        if m["role"] == "system" or isinstance(m["content"], str):
            out.append(json.dumps(m, sort_keys=True))
        else:
            out += [json.dumps([m["role"], b], sort_keys=True) for b in m["content"]]
    return out


def _kept_in_order(client: list[dict], upstream: list[dict]) -> bool:
    """The client's pieces that the upstream got are a subsequence of what the client sent (pages
    stand in for the rest), and that subsequence holds every system message: each in place."""
    sent, got = _tokens(client), _tokens(upstream)
    known, at, matched = set(sent), 0, []
    for piece in got:
        if piece in known:
            while at < len(sent) and sent[at] != piece:
                at += 1
            if at == len(sent):
                return False
            matched.append(at)
            at += 1
    systems = [i for i, piece in enumerate(sent) if piece.startswith('{"content"') and '"role": "system"' in piece]
    return set(systems) <= set(matched)


def _pairs_intact(body: dict) -> bool:
    """Every tool_result answers a tool_use of the message just before it."""
    messages = body["messages"]
    for prev, m in zip([None, *messages], messages):
        results = [b["tool_use_id"] for b in m["content"] if isinstance(m["content"], list)
                   and b.get("type") == "tool_result"]
        before = (prev or {}).get("content") or []
        uses = {b["id"] for b in before if isinstance(b, dict) and b.get("type") == "tool_use"}
        if any(r not in uses for r in results):
            return False
    return True


def _marks(body: dict) -> int:
    blocks = [*(body.get("system") if isinstance(body.get("system"), list) else []), *body.get("tools", []),
              *(b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"])]
    return sum(1 for b in blocks if isinstance(b, dict) and "cache_control" in b)


def _unmarked(message: dict) -> dict:
    content = message["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    return {"role": message["role"], "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in blocks]}


def _bill_reads_the_transcript(home: Path, sent: list[dict], arrivals: list, capsys) -> None:
    """`optictx bill` on the transcript Claude Code wrote: every request's messages as the client
    sent them (the tap's record, cache marks aside), and the usage the upstream reported for
    each call as the billed column."""
    from optictx.cli import main
    from optictx.eval.bill import replay
    from optictx.eval.requests import client_body
    from optictx.eval.sessions import load_session

    from serve_peers import _anthropic_answer, _anthropic_usage

    [transcript] = (home / ".claude" / "projects").glob("*/*.jsonl")
    session = load_session(transcript)
    assert len(session.calls) == len(sent)
    for k, client in enumerate(sent):
        ours = client_body(session, k, "anthropic", "")["messages"]
        assert [_unmarked(m) for m in ours] == [_unmarked(m) for m in client["messages"]]
    assert client_body(session, 0, "anthropic", "")["tools"] == client["tools"]  # recorded by this version
    # Built request by request (`eval/grown.py`), the bill is the one the wire gives.
    assert replay(session, "anthropic").rows == replay(session, "anthropic", wire=True).rows
    assert main(["bill", str(transcript), "--json"]) == 0
    bill = json.loads(capsys.readouterr().out.splitlines()[0])
    assert bill["requests"] == len(sent) and bill["provider"] == "anthropic"
    # what the upstream reported: sized by each request it asked a tool for, fixed for its last answer
    reported = [*(_anthropic_usage(a.raw) for a in arrivals[:-1]), _anthropic_answer("m", "")["usage"]]
    assert bill["billed_tokens"] == sum(u["input_tokens"] + u["cache_read_input_tokens"] +
                                        u["cache_creation_input_tokens"] for u in reported)
    gap = bill["gap"]
    assert gap["counting"] + gap["cache"] == pytest.approx(bill["passthrough_cost"] - bill["billed_cost"], abs=2)


def test_claude_code_on_its_default_model_is_one_conversation_that_sends_pages(tmp_path, capsys):
    binary = claude()
    if binary is None:
        pytest.skip("Claude Code CLI not installed (make claude: npm install --prefix build/claude "
                    "@anthropic-ai/claude-code)")
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    if version.returncode != 0:
        pytest.skip(f"Claude Code CLI at {binary} does not run here: {(version.stderr or version.stdout)[-300:]}")
    work = _workspace(tmp_path / "work")
    upstream, server = start_upstream()
    upstream.tool_uses = script(work)
    calls = len(upstream.tool_uses)
    proxy = Proxy(ServeConfig(anthropic_upstream=upstream.anthropic_url, budget=BUDGET))
    tap = Tap(proxy.url)
    try:
        run = run_claude(binary, tap.url, work, tmp_path / "home")
        assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
        result = json.loads(run.stdout)
        assert result["result"] == upstream.reply and not result["is_error"]
        assert calls >= 30 and not upstream.tool_uses, "every scripted tool call was asked for"
        assert (work / "calc.py").read_text().count(" - b\n") == 3, "Claude Code ran the edits"
        session = [a for a in upstream.arrivals if a.path.startswith("/v1/messages") and a.body.get("tools")]
        assert len(session) == calls + 1
        bodies = [a.body for a in session]
        sent = [a.body for a in tap.sent if a.body.get("tools")]
        assert len(sent) == len(bodies)
        assert list(result["modelUsage"]) == [bodies[0]["model"]]  # no --model: its default, whatever it is today
        # Its system messages inside `messages` (the mid-conversation-system beta; an environment
        # note first, reminders later) reach the upstream as the client sent them, in place.
        assert sum(m["role"] == "system" for m in sent[-1]["messages"]) >= 2, "system messages mid-session"
        for client, body in zip(sent, bodies):
            assert _kept_in_order(client["messages"], body["messages"])
            assert _pairs_intact(body) and _marks(body) <= 4
        pages = [b for m in bodies[-1]["messages"] if isinstance(m["content"], list) for b in m["content"]
                 if b.get("type") == "image" and b["source"]["media_type"] == "image/webp"]
        assert pages, "late in the session, old tool results went as page images"
        from optictx.eval.bodies import _image_size

        # as large as Claude takes an image without resizing it: one page where 4.5 small ones were
        assert {_image_size(p["source"]["data"]) for p in pages} == {(1092, 1092)}
        tenant = tenant_of({}, personal=True)
        conversations = proxy.proxy.ledger.conversations(tenant)
        assert len(conversations) == 1 and conversations[0]["requests"] == calls + 1
        events = [r["event"] for r in proxy.proxy.ledger.requests(tenant, conversations[0]["id"])]
        assert events[0] == "verbatim" and {"paid", "forced"} & set(events)
        assert all(r["status"] == 200 for r in proxy.proxy.ledger.requests(tenant, conversations[0]["id"]))
        _bill_reads_the_transcript(tmp_path / "home", sent, session, capsys)
    finally:
        proxy.stop()
        tap.stop()
        stop_upstream(server)


NEEDLE = "note 3: the value of step 3 is 21"  # in the session's first read of notes.txt only
HANDLE = re.compile(rf"page ([{ALPHABET}]{{{LENGTH}}})")


def _last_tool_result(body: dict) -> str:
    """The text of the last tool_result in a request: what the model reads of its last call."""
    block = [b for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]
             if b.get("type") == "tool_result"][-1]
    content = block["content"]
    return content if isinstance(content, str) else "".join(c.get("text", "") for c in content)


def _page_of_hit(body: dict) -> dict:
    """What a model does with its search's result: recall the page its first hit names."""
    found = HANDLE.search(_last_tool_result(body))
    return {"page": found.group(1) if found else "none"}


def test_claude_code_with_the_mcp_server_gets_back_the_words_behind_a_page(tmp_path):
    binary = claude()
    if binary is None:
        pytest.skip("Claude Code CLI not installed (make claude)")
    work, home = _workspace(tmp_path / "work"), tmp_path / "home"
    upstream, server = start_upstream()
    upstream.tool_uses = [*script(work), ("ToolSearch", {"query": "select:mcp__optictx__search,mcp__optictx__recall"}),
                          ("mcp__optictx__search", {"query": f'"{NEEDLE}"'}),
                          ("mcp__optictx__recall", _page_of_hit)]
    # A tighter budget than the other test's: the first reads are on pages by the time of the search.
    proxy = Proxy(ServeConfig(anthropic_upstream=upstream.anthropic_url, budget=24_000))
    tap = Tap(proxy.url)
    try:
        env = {**os.environ, "HOME": str(home)}
        home.mkdir(parents=True, exist_ok=True)
        add = subprocess.run([binary, "mcp", "add", "--scope", "user", "--transport", "http", "optictx",
                              proxy.url + "/mcp"], env=env, cwd=home, capture_output=True, text=True,
                             timeout=60)  # the README's line, typed in another folder than the session's
        assert add.returncode == 0, add.stdout + add.stderr
        run = run_claude(binary, tap.url, work, home,
                         tools="Bash,Read,Grep,Edit,Write,Glob,mcp__optictx__search,mcp__optictx__recall")
        assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
        sent = [a.body for a in tap.sent if a.body.get("tools")]
        assert not upstream.tool_uses, ("every scripted call was asked for, the MCP ones included",
                                        " ".join(t["name"] for t in sent[-1]["tools"]))
        names = {t["name"] for t in sent[-1]["tools"]}
        assert {"mcp__optictx__search", "mcp__optictx__recall"} <= names
        searched, recalled = _last_tool_result(sent[-2]), _last_tool_result(sent[-1])
        # The needle was on a page when the model asked: the upstream got it only as an image.
        bodies = [a.body for a in upstream.arrivals if a.body.get("tools")]
        loading, asked = bodies[-4], bodies[-3]  # the requests answered with ToolSearch, and with search
        # Deferred (named in a system message only), the tools are named beside the pages already.
        assert "mcp__optictx__recall" not in {t["name"] for t in loading["tools"]}
        assert "call mcp__optictx__search first" in json.dumps(loading)
        assert NEEDLE not in json.dumps(asked) and "call mcp__optictx__search first" in json.dumps(asked)
        # ToolSearch's answer (tool_reference blocks) is understood: what follows it still compresses.
        assert len(bodies[-1]["messages"]) < len(sent[-1]["messages"])
        assert NEEDLE in searched and HANDLE.search(searched)
        # The recall is the stored turns, byte for byte: the Read result that holds the needle, as
        # Claude Code sent it in its own request.
        first_read = next(b for m in sent[-1]["messages"] if isinstance(m["content"], list) for b in m["content"]
                          if b.get("type") == "tool_result" and NEEDLE in json.dumps(b))
        text = first_read["content"] if isinstance(first_read["content"], str) else first_read["content"][0]["text"]
        assert text in recalled
        tenant = tenant_of({}, personal=True)
        assert len(proxy.proxy.ledger.conversations(tenant)) == 1  # one session, one conversation
    finally:
        proxy.stop()
        tap.stop()
        stop_upstream(server)


SUMMARY = "create a detailed summary of the conversation"  # Claude Code's own compaction prompt


def test_claude_code_runs_past_its_own_compaction_through_the_proxy(tmp_path):
    """Claude Code summarises a conversation away when the usage the API reports nears its
    window (here made 60,000 tokens with CLAUDE_CODE_AUTO_COMPACT_WINDOW, so the session can be
    short). The upstream reports usage as Anthropic counts it (text by size, images by pixels).
    Sent as it came, the session is summarised midway; through the proxy, the usage is what
    optictx sent, and the session runs to its end with every tool result kept, in pages."""
    binary = claude()
    if binary is None:
        pytest.skip("Claude Code CLI not installed (make claude)")
    calls = [("Bash", {"command": f"seq {k} {k + 4000}", "description": f"count from {k}"}) for k in range(12)]
    seen = {}
    for way in ("as it came", "through the proxy"):
        work = tmp_path / way.replace(" ", "-")
        work.mkdir()
        upstream, server = start_upstream()
        upstream.tool_uses = list(calls)
        proxy = Proxy(ServeConfig(anthropic_upstream=upstream.anthropic_url, budget=40_000)) if (
            way == "through the proxy") else None
        tap = Tap(proxy.url if proxy else upstream.anthropic_url)
        try:
            os.environ["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = "60000"
            run = run_claude(binary, tap.url, work, tmp_path / f"home-{len(seen)}")
            assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
            sent = [a.body for a in tap.sent if a.body.get("messages")]
            seen[way] = (sum(SUMMARY in json.dumps(b) for b in sent), sent[-1], upstream.tool_uses)
        finally:
            os.environ.pop("CLAUDE_CODE_AUTO_COMPACT_WINDOW", None)
            tap.stop()
            if proxy is not None:
                proxy.stop()
            stop_upstream(server)
    summaries, _, _ = seen["as it came"]
    assert summaries >= 1, "sent as it came, the session reached Claude Code's own compaction"
    summaries, last, left = seen["through the proxy"]
    assert summaries == 0 and not left, "through the proxy it never did, and every call was made"
    results = [b for m in last["messages"] if isinstance(m["content"], list) for b in m["content"]
               if b.get("type") == "tool_result"]
    assert len(results) == len(calls), "the client still holds every tool result: nothing summarised away"


def _opening(message: dict) -> tuple[list[dict], dict]:
    """The first user message's instruction pages (`--image-instructions`), and the message as
    the client wrote it."""
    from optictx.serve.instructions import HEAD

    content = message["content"]
    head = content[0].get("text", "") if isinstance(content, list) and content else ""
    pages = []
    if head.startswith(HEAD.split("{n}")[0]):
        pages = [b for b in content[1:] if b.get("type") == "image"][: int(head.split()[1])]
        content = content[1 + len(pages) :]
    return pages, {**message, "content": content}


def test_claude_code_with_its_instructions_on_pages(tmp_path):
    """`--image-instructions` with the real CLI: its system prompt's prose and its tools'
    descriptions reach the upstream as pages that open the conversation, the same bytes on every
    request; tool names and schemas, short system blocks and every message as the client sent
    them; and the pages read back (Tesseract) at 98% of their characters or better."""
    binary = claude()
    if binary is None:
        pytest.skip("Claude Code CLI not installed (make claude)")
    from optictx.serve.instructions import POINTER, STUB

    work = _workspace(tmp_path / "work")
    upstream, server = start_upstream()
    upstream.tool_uses = script(work)[:8]
    proxy = Proxy(ServeConfig(anthropic_upstream=upstream.anthropic_url, budget=BUDGET, image_instructions=True))
    tap = Tap(proxy.url)
    try:
        run = run_claude(binary, tap.url, work, tmp_path / "home")
        assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
        assert json.loads(run.stdout)["result"] == upstream.reply and not upstream.tool_uses
        bodies = [a.body for a in upstream.arrivals if a.path.startswith("/v1/messages") and a.body.get("tools")]
        sent = [a.body for a in tap.sent if a.body.get("tools")]
        assert len(sent) == len(bodies) == 9
        seen = set()
        for client, body in zip(sent, bodies):
            assert [(t["name"], t.get("input_schema")) for t in body["tools"]] == \
                [(t["name"], t.get("input_schema")) for t in client["tools"]]
            stubbed = [t["name"] for t in body["tools"] if t.get("description") == STUB.format(name=t["name"])]
            assert len(stubbed) >= 3, "the CLI's long tool descriptions went on the pages"
            short = [b for b in client["system"] if len(b["text"]) < 1000]
            assert [b["text"] for b in body["system"]] == [*(b["text"] for b in short), POINTER]
            pages, first = _opening(body["messages"][0])
            assert pages, "the pages open the conversation"
            seen.add(json.dumps(pages))
            assert _kept_in_order(client["messages"], [first, *body["messages"][1:]])
            assert _pairs_intact(body) and _marks(body) <= 4
        assert len(seen) == 1, "the same pages on every request: the provider's cache reads them back"
        records = proxy.proxy.ledger.requests(tenant_of({}, personal=True),
                                              proxy.proxy.ledger.conversations(tenant_of({}, personal=True))[0]["id"])
        assert all(r["sent"] < r["original"] for r in records), "every request counts less than as it came"
        # Sent as it came but for its instructions, a request costs less (the meter prices what went).
        assert all(r["cost"] < r["passthrough"] for r in records if r["verbatim"]) and records[0]["verbatim"]
        if _tesseract_missing():
            return
        _read_back(json.loads(seen.pop()), client)
    finally:
        proxy.stop()
        tap.stop()
        stop_upstream(server)


def _read_back(pages: list[dict], client: dict) -> None:
    """The pages read by Tesseract against the text the client sent (`instructions.draw` drawn
    again from it: the pages must be exactly those)."""
    from optictx.instructions import draw
    from optictx.readers import TesseractReader, char_accuracy
    from optictx.serve.instructions import MIN_DESCRIPTION, MIN_SYSTEM, TITLE

    prose = "\n\n".join(b["text"] for b in client["system"] if len(b["text"]) >= MIN_SYSTEM)
    sections = [(TITLE, prose), *((f"TOOL {t['name']}", t["description"]) for t in client["tools"]
                                  if len(t.get("description", "")) >= MIN_DESCRIPTION and not t.get("defer_loading"))]
    drawn = draw(sections, "anthropic")
    assert [p["source"]["data"] for p in pages] == list(drawn.images)
    pairs = drawn.read(TesseractReader())
    assert sum(char_accuracy(truth, read) * len(truth) for truth, read in pairs) / sum(len(t) for t, _ in pairs) >= 0.98
