"""How long `optictx bill` takes on a long session, in each client's own file: a Claude Code
transcript and a Codex rollout of the same conversation (the shipped sample agent conversation,
repeated, as tool calls and their results), timed in one run.

    python benchmarks/bill_speed.py [--calls 3000] [--profile claude-code|codex]

Prints the seconds each took and the ratio; `--profile` prints the top of cProfile's table for
one of them.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import tempfile
import time
from pathlib import Path
from typing import Any

from optictx.eval.bill import replay
from optictx.eval.sessions import load_session
from optictx.sample import sample_conversation


def _exchanges(calls: int) -> list[tuple[str, str, str]]:
    """(what the person or a tool said, the call the model makes, what it says) per call."""
    texts = [m["content"] for m in sample_conversation() if isinstance(m.get("content"), str) and m["content"]]
    return [(texts[k % len(texts)], f"cat part_{k}.txt", texts[(k * 7 + 3) % len(texts)]) for k in range(calls)]


def claude_code_transcript(path: Path, calls: int) -> None:
    """A transcript as Claude Code writes one: a user record, then per call the assistant's
    tool_use (with the usage billed for it) and the tool's result as a user record."""
    lines: list[dict[str, Any]] = [{"type": "user", "sessionId": "s", "message": {"role": "user",
                                                                                  "content": "Fix the build."}}]
    for k, (result, command, _) in enumerate(_exchanges(calls)):
        usage = {"input_tokens": 3, "cache_read_input_tokens": 20_000 + 40 * k, "cache_creation_input_tokens": 300}
        lines.append({"type": "assistant", "sessionId": "s", "message": {
            "id": f"msg_{k}", "role": "assistant", "model": "claude-sonnet-4-5", "usage": usage,
            "content": [{"type": "tool_use", "id": f"toolu_{k}", "name": "Bash", "input": {"command": command}}]}})
        lines.append({"type": "user", "sessionId": "s", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{k}", "content": result}]}})
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))


def codex_rollout(path: Path, calls: int) -> None:
    """The same conversation as a Codex rollout: function calls, their outputs, usage per response."""
    lines: list[dict[str, Any]] = [
        {"type": "session_meta", "payload": {"model_provider": "openai", "base_instructions": {"text": "Be brief."}}},
        {"type": "turn_context", "payload": {"model": "gpt-5"}},
        {"type": "response_item", "payload": {"type": "message", "role": "user",
                                              "content": [{"type": "input_text", "text": "Fix the build."}]}}]
    for k, (result, command, _) in enumerate(_exchanges(calls)):
        lines.append({"type": "response_item", "payload": {"type": "function_call", "name": "shell", "call_id": f"c{k}",
                                                           "arguments": json.dumps({"command": command})}})
        lines.append({"type": "token_usage_record", "payload": {"usage": {
            "input_tokens": 20_300 + 40 * k, "cached_input_tokens": 20_000 + 40 * k}}})
        lines.append({"type": "response_item", "payload": {"type": "function_call_output", "call_id": f"c{k}",
                                                           "output": result}})
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--profile", choices=["claude-code", "codex"])
    args = ap.parse_args()
    seconds = {}
    with tempfile.TemporaryDirectory() as tmp:
        files = {"claude-code": Path(tmp) / "transcript.jsonl", "codex": Path(tmp) / "rollout-1.jsonl"}
        claude_code_transcript(files["claude-code"], args.calls)
        codex_rollout(files["codex"], args.calls)
        for name, path in files.items():
            session = load_session(path)
            profile = cProfile.Profile() if args.profile == name else None
            t0 = time.perf_counter()
            if profile is not None:
                profile.enable()
            bill = replay(session, session.provider)
            if profile is not None:
                profile.disable()
            seconds[name] = time.perf_counter() - t0
            print(f"{name}: {len(bill.rows)} requests in {seconds[name]:.1f} s "
                  f"({1000 * seconds[name] / len(bill.rows):.1f} ms a request), cost {bill.ratio:.3f}x")
            if profile is not None:
                pstats.Stats(profile).sort_stats("cumulative").print_stats(25)
    print(f"the transcript takes {seconds['claude-code'] / seconds['codex']:.2f}x the rollout's time")


if __name__ == "__main__":
    main()
