"""The real Codex CLI (`@openai/codex` from the npm registry; `make test` installs it under
build/codex) through `optictx serve`, against a small real upstream on 127.0.0.1 that speaks
the Responses API and asks for shell commands: Codex runs them and sends their output back, so
one `codex exec` makes a session of many requests, as a user's would."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import needs

pytestmark = [needs("starlette", "serve"), needs("uvicorn", "serve"), needs("httpx", "serve")]

from optictx.handles import ALPHABET, LENGTH  # noqa: E402
from optictx.serve import ServeConfig  # noqa: E402
from optictx.serve.conversations import tenant_of  # noqa: E402

from provider_cache import OpenAICache  # noqa: E402
from serve_peers import Proxy, start_upstream, stop_upstream  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CALLS = 14
TASK = "count for me"


def _codex() -> str | None:
    found = os.environ.get("OPTICTX_CODEX") or shutil.which("codex")
    local = ROOT / "build" / "codex" / "node_modules" / ".bin" / "codex"
    return found or (str(local) if local.exists() else None)


def run_codex(codex: str, home: Path, url: str, more: str = "") -> subprocess.CompletedProcess:
    """`codex exec TASK` with its model provider at `url` (the proxy, or a tap before it) and
    `more` lines of config.toml, in `home`. No sandbox: Codex's needs user namespaces, which a
    CI container may not give; the commands are `seq` and `echo`, in a temporary folder."""
    (home / "config.toml").write_text(
        'model = "gpt-5-codex"\nmodel_provider = "optictx"\n[model_providers.optictx]\nname = "optictx"\n'
        f'base_url = "{url}/v1"\nwire_api = "responses"\nenv_key = "OPTICTX_TEST_KEY"\n' + more)
    env = {**os.environ, "CODEX_HOME": str(home), "OPTICTX_TEST_KEY": "key-codex"}
    return subprocess.run([codex, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", TASK],
                          env=env, cwd=home, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)


def _bill_reads_the_rollout(home: Path, bodies: list[dict], capsys) -> None:
    """`optictx bill` on the rollout Codex wrote: one request per call, the first as Codex sent it
    (it went upstream as it came, so the upstream's record is the client's), and the usage the
    upstream reported for every call as the billed column."""
    from optictx.cli import main
    from optictx.eval.bill import replay
    from optictx.eval.requests import client_body
    from optictx.eval.sessions import load_session

    [rollout] = (home / "sessions").glob("*/*/*/rollout-*.jsonl")
    session = load_session(rollout)
    assert len(session.calls) == len(bodies)
    first, sent = client_body(session, 0, "responses", "")["input"], bodies[0]["input"]
    assert first[1:] == sent[1:]
    # The base instructions as the rollout keeps them: Codex sends a variant of them for its model.
    assert first[0]["role"] == sent[0]["role"] == "developer"
    assert first[0]["content"][0]["text"][:60] == sent[0]["content"][0]["text"][:60]
    # Built request by request (`eval/grown.py`), the bill is the one the wire gives.
    assert replay(session, "openai:gpt-5").rows == replay(session, "openai:gpt-5", wire=True).rows
    assert main(["bill", str(rollout), "--json"]) == 0
    bill = json.loads(capsys.readouterr().out.splitlines()[0])
    assert bill["requests"] == len(bodies) and bill["provider"] == "openai:gpt-5"
    assert bill["proxied"] is True  # its model provider is named optictx: the usage is optictx's requests'
    reported = OpenAICache()  # what the upstream reported for each request, as it counted it
    assert bill["billed_tokens"] == sum(reported.usage(b, 0.0)["input_tokens"] for b in bodies)


def _bill_agrees_with_the_proxy(home: Path, recorded: list[dict]) -> None:
    """`optictx bill` replays the rollout of a session that went through the proxy: its "through
    optictx" is within 5% of what the upstream billed through the proxy, as the proxy recorded
    it (the oracle: the usage in the proxy's ledger, priced at the model's prices)."""
    from optictx.eval.bill import replay
    from optictx.eval.sessions import load_session

    [rollout] = (home / "sessions").glob("*/*/*/rollout-*.jsonl")
    bill = replay(load_session(rollout), "openai:gpt-5", gap=1.0, budget=16_000)
    ours, theirs = [r.optictx_cost for r in bill.rows], [r["billed"] for r in recorded]
    assert sum(ours) == pytest.approx(sum(theirs), rel=0.05)


def test_a_codex_session_through_the_proxy_is_one_conversation_that_compresses(tmp_path, capsys):
    codex = _codex()
    if codex is None:
        pytest.skip("Codex CLI not installed (make codex: npm install --prefix build/codex @openai/codex)")
    version = subprocess.run([codex, "--version"], capture_output=True, text=True, timeout=60)
    if version.returncode != 0:
        pytest.skip(f"Codex CLI at {codex} does not run here: {(version.stderr or version.stdout)[-300:]}")
    upstream, server = start_upstream()
    upstream.calls = [("exec_command", json.dumps({"cmd": f"seq {k} {k + 500}"})) for k in range(CALLS)]
    upstream.cache = OpenAICache()  # usage as OpenAI counts it: the rollout records it, the bill reads it
    proxy = Proxy(ServeConfig(upstream=upstream.openai_url, vision="auto", budget=16_000, keep_recent=4))
    try:
        run = run_codex(codex, tmp_path, proxy.url)
        assert run.returncode == 0, run.stderr[-2000:]
        assert upstream.reply in run.stdout
        bodies = [a.body for a in upstream.arrivals if a.path == "/v1/responses"]
        assert len(bodies) == CALLS + 1 and all(b["stream"] is True and b["store"] is False for b in bodies)
        given = {f"rs_{n}": f"gAAAA-{n}-" + "e" * 80 for n in range(len(bodies))}
        for body in bodies:  # encrypted reasoning went back unchanged, each before its call
            items = body["input"]
            for n, item in enumerate(items):
                if item.get("type") == "reasoning":
                    assert item["encrypted_content"] == given[item["id"]]
                    assert items[n + 1]["type"] == "function_call"
            calls = {i["call_id"] for i in items if i.get("type") == "function_call"}
            assert all(i["call_id"] in calls for i in items if i.get("type") == "function_call_output")
        # The person's request is pinned, not Codex's environment note that comes before it: every
        # request keeps it as Codex sent it, compressed or not.
        asked = next(i for i in bodies[0]["input"] if i.get("role") == "user" and TASK in json.dumps(i))
        assert "<environment_context>" in json.dumps(bodies[0]["input"]) and "<environment_context>" not in str(asked)
        assert all(asked in body["input"] for body in bodies)
        pages = [p for i in bodies[-1]["input"] if isinstance(i.get("content"), list) for p in i["content"]
                 if p.get("type") == "input_image" and p["image_url"].startswith("data:image/webp")]
        assert pages, "the session's old command outputs went as page images"
        tenant = tenant_of({}, personal=True)  # one person's proxy: the default on loopback without a key
        conversations = proxy.proxy.ledger.conversations(tenant)
        assert len(conversations) == 1 and conversations[0]["requests"] == CALLS + 1
        events = [r["event"] for r in proxy.proxy.ledger.requests(tenant, conversations[0]["id"])]
        assert events[0] == "verbatim" and "append" in events[1:] and "forced" in events
        _bill_reads_the_rollout(tmp_path, bodies, capsys)
        _bill_agrees_with_the_proxy(tmp_path, proxy.proxy.ledger.requests(tenant, conversations[0]["id"]))
    finally:
        proxy.stop()
        stop_upstream(server)


NEEDLE = "the quartz heron sings at dusk"  # words, which the factsheet beside the pages does not keep
HANDLE = re.compile(rf"page ([{ALPHABET}]{{{LENGTH}}})")


def _outputs(body: dict) -> list[str]:
    """The function call outputs of a request, as text, in order."""
    return [json.dumps(i["output"]) if not isinstance(i["output"], str) else i["output"]
            for i in body["input"] if i.get("type") == "function_call_output"]


def _recall_first_hit(body: dict) -> str:
    """What a model does with its search's result: recall the page its first hit names."""
    found = HANDLE.search(_outputs(body)[-1])
    return json.dumps({"page": found.group(1) if found else "none"})


def test_codex_with_the_mcp_server_gets_back_the_words_behind_a_page(tmp_path):
    codex = _codex()
    if codex is None:
        pytest.skip("Codex CLI not installed (make codex)")
    upstream, server = start_upstream()
    upstream.calls = [("exec_command", json.dumps({"cmd": f"echo build id {NEEDLE}"})),
                      *(("exec_command", json.dumps({"cmd": f"seq {k} {k + 500}"})) for k in range(CALLS)),
                      ("mcp__optictx/search", json.dumps({"query": f'"{NEEDLE}"'})),  # Codex's MCP tools: a namespace
                      ("mcp__optictx/recall", _recall_first_hit)]
    proxy = Proxy(ServeConfig(upstream=upstream.openai_url, vision="auto", budget=16_000, keep_recent=4))
    try:
        mcp = f'[mcp_servers.optictx]\nurl = "{proxy.url}/mcp"\n'  # the two lines a user adds
        run = run_codex(codex, tmp_path, proxy.url, mcp)
        assert run.returncode == 0, run.stderr[-2000:]
        assert not upstream.calls, "every scripted call was asked for"
        bodies = [a.body for a in upstream.arrivals if a.path == "/v1/responses"]
        echoed = next(o for o in _outputs(bodies[1]) if NEEDLE in o)  # went as it came: Codex's own bytes
        asked = bodies[-3]  # the request answered with the search
        assert NEEDLE not in json.dumps(asked), "the needle was only on a page when the model asked"
        assert "call mcp__optictx" in json.dumps(asked)  # the caption names the tools
        searched, recalled = _outputs(bodies[-2])[-1], _outputs(bodies[-1])[-1]
        assert HANDLE.search(searched) and NEEDLE in searched
        stored = json.loads(echoed) if echoed.startswith('"') else echoed
        assert json.dumps(stored)[1:-1] in recalled  # the stored output, byte for byte (as JSON text)
        assert len(proxy.proxy.ledger.conversations(tenant_of({}, personal=True))) == 1
    finally:
        proxy.stop()
        stop_upstream(server)


def test_codex_with_its_instructions_on_pages(tmp_path):
    """`--image-instructions` with the real Codex CLI: its developer messages' long texts and its
    tools' long descriptions (a namespace's too) reach the upstream as pages that open the first
    user message, the same on every request, and Codex runs its session to the end: every
    tool's name and parameters, every other message part, as it sent them."""
    codex = _codex()
    if codex is None:
        pytest.skip("Codex CLI not installed (make codex)")
    from optictx.serve.instructions import HEAD, POINTER, STUB

    from serve_peers import Tap

    upstream, server = start_upstream()
    upstream.calls = [("exec_command", json.dumps({"cmd": f"seq {k} {k + 50}"})) for k in range(4)]
    proxy = Proxy(ServeConfig(upstream=upstream.openai_url, vision="auto", budget=16_000, image_instructions=True))
    tap = Tap(proxy.url)
    try:
        run = run_codex(codex, tmp_path, tap.url)
        assert run.returncode == 0, run.stderr[-2000:]
        assert upstream.reply in run.stdout and not upstream.calls
        bodies = [a.body for a in upstream.arrivals if a.path == "/v1/responses"]
        sent = [a.body for a in tap.sent if a.path.endswith("/responses")]
        assert len(bodies) == len(sent) == 5
        opened = set()
        for client, body in zip(sent, bodies):
            def shape(tools):  # names and parameters, a namespace's tools too
                return [(t.get("name"), t.get("parameters"), shape(t.get("tools") or [])) for t in tools]

            assert shape(body["tools"]) == shape(client["tools"])
            described = [t.get("description") for t in body["tools"]] + [
                i.get("description") for t in body["tools"] for i in t.get("tools") or []]
            lead = STUB.split("{name}")[0]
            stubs = [d for d in described if isinstance(d, str) and d == STUB.format(name=d[len(lead) :].split('"')[0])]
            assert len(stubs) >= 2
            user = next(i for i, m in enumerate(client["input"]) if m.get("role") == "user")
            assert body["input"][user + 1 :] == client["input"][user + 1 :]
            content = body["input"][user]["content"]
            n = int(content[0]["text"].split()[1])
            assert content[0]["text"] == HEAD.format(n=n) and n >= 1
            assert all(p["type"] == "input_image" for p in content[1 : 1 + n])
            assert content[1 + n :] == client["input"][user]["content"]
            assert body["input"][0]["content"][0]["text"] == POINTER
            opened.add(json.dumps(content[: 1 + n]))
        assert len(opened) == 1, "the same pages on every request"
    finally:
        proxy.stop()
        tap.stop()
        stop_upstream(server)
