"""A deterministic sample agent conversation: a coding agent at work on a small service.

The demo, the examples and the benchmarks use it, so everyone sees the same pages. It mixes what
real agent traffic holds: requests, plans, tool calls, source files, test logs with tracebacks,
JSON with ids and amounts, diffs, and the exact numbers that optical compression can blur.
`examples/sample_agent.jsonl` is this generator's output (a test keeps the two equal).
"""

from __future__ import annotations

import importlib
import inspect
import json
import random
import uuid
from typing import Any

SYSTEM = (
    "You are a careful software agent working in the repository `ledger-svc`, a small invoicing "
    "service (Python 3.11, FastAPI, SQLite). Use the tools to read, search, edit and test code. "
    "Explain what you change and why, keep diffs small, and run the tests before you say a task "
    "is done. Never invent file contents: read them first."
)

MODULES = ["invoices", "payments", "customers", "tax", "currency", "reports", "webhooks", "auth"]
VERBS = ["compute", "validate", "load", "render", "apply", "reconcile", "export", "normalize"]
NOUNS = ["total", "discount", "line_items", "due_date", "vat", "exchange_rate", "balance", "refund"]
TASKS = [
    "The monthly report double-counts refunds for customers with more than one currency. Find out why and fix it.",
    "Invoices issued on the last day of a month get a due date in the wrong month. Please fix the date math.",
    "Add an endpoint GET /invoices/{id}/pdf-url that returns a signed URL valid for 15 minutes.",
    "Webhook retries are hammering a partner: cap retries at 5 with exponential backoff and jitter.",
    "VAT for reverse-charge customers in the EU must be zero on the invoice but reported separately.",
    "The currency module rounds half-up; finance wants banker's rounding (half-even) everywhere.",
    "Customers reported that discounts above 100% are accepted. Reject them with a clear 422 error.",
    "Speed up reports.export_csv: it takes 40 s for 200k invoices. Profile first, then optimise.",
    "Rotate the API signing key without downtime: accept the old and the new key for 24 hours.",
    "Write a migration that backfills customers.country from the billing address, idempotently.",
]
FOLLOW_UPS = [
    "Looks good. Can you also add a test for the edge case you mentioned?",
    "Before you continue: what exactly did the failing assertion compare?",
    "Please keep the public function names unchanged, other services import them.",
    "Can you double-check the numbers against the fixture file?",
    "Thanks. Summarise the change in two sentences for the changelog.",
]


def _code(rng: random.Random, module: str, n_funcs: int) -> str:
    lines = [f'"""{module}: part of ledger-svc."""', "", "from decimal import ROUND_HALF_UP, Decimal",
             "from datetime import date, timedelta", ""]
    for _ in range(n_funcs):
        verb, noun = rng.choice(VERBS), rng.choice(NOUNS)
        limit = rng.randint(2, 500)
        lines += [
            "",
            f"def {verb}_{noun}(items: list[dict], *, limit: int = {limit}) -> Decimal:",
            f'    """{verb.capitalize()} the {noun.replace("_", " ")} of the given items."""',
            "    total = Decimal(\"0\")",
            "    for i, item in enumerate(items):",
            "        if i >= limit:",
            "            break",
            f"        amount = Decimal(str(item.get(\"{noun}\", 0)))",
            f"        total += (amount * Decimal(\"{rng.randint(1, 99) / 100:.2f}\")).quantize(",
            "            Decimal(\"0.01\"), rounding=ROUND_HALF_UP",
            "        )",
            "    return total",
        ]
    return "\n".join(lines) + "\n"


def _pytest_log(rng: random.Random, module: str, failed: int) -> str:
    passed = rng.randint(40, 180)
    out = ["============================= test session starts ==============================",
           "platform linux -- Python 3.11.7, pytest-8.3.2, pluggy-1.5.0",
           f"collected {passed + failed} items", ""]
    for i in range(failed):
        noun = rng.choice(NOUNS)
        want, got = rng.randint(100, 99999) / 100, rng.randint(100, 99999) / 100
        out += [f"___________________ test_{noun}_{i} ___________________", "",
                f"    def test_{noun}_{i}():",
                f"        result = {module}.{rng.choice(VERBS)}_{noun}(FIXTURE_{i})",
                f">       assert result == Decimal(\"{want:.2f}\")",
                f"E       AssertionError: assert Decimal('{got:.2f}') == Decimal('{want:.2f}')",
                "", f"tests/test_{module}.py:{rng.randint(10, 400)}: AssertionError"]
    status = f"{failed} failed, {passed} passed" if failed else f"{passed} passed"
    rule = "=" * 25
    out.append(f"{rule} {status} in {rng.randint(1, 30)}.{rng.randint(10, 99)}s {rule}")
    return "\n".join(out)


def _api_json(rng: random.Random) -> str:
    body = {
        "id": str(uuid.UUID(int=rng.getrandbits(128))),
        "customer": {"id": f"cus_{rng.getrandbits(40):010x}", "country": rng.choice(["DE", "FR", "NL", "US"])},
        "currency": rng.choice(["EUR", "USD", "GBP"]),
        "lines": [{"sku": f"SKU-{rng.randint(1000, 9999)}", "qty": rng.randint(1, 12),
                   "unit_price": round(rng.uniform(1, 900), 2)} for _ in range(rng.randint(2, 5))],
        "issued": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        "status": rng.choice(["draft", "open", "paid", "void"]),
    }
    return json.dumps(body, indent=2)


def _diff(rng: random.Random, module: str) -> str:
    n = rng.randint(10, 300)
    return "\n".join([
        f"--- a/ledger/{module}.py", f"+++ b/ledger/{module}.py", f"@@ -{n},7 +{n},8 @@",
        "     for i, item in enumerate(items):",
        "         if i >= limit:",
        "             break",
        "-        amount = Decimal(item.get(\"total\", 0))",
        "+        # str() first: Decimal(float) keeps binary noise such as 0.1000000000000000055",
        "+        amount = Decimal(str(item.get(\"total\", 0)))",
        "         total += amount",
    ])


class _Chat:
    def __init__(self, rng: random.Random) -> None:
        self.rng, self.turns, self.calls = rng, [], 0

    def say(self, role: str, content: str) -> None:
        self.turns.append({"role": role, "content": content})

    def tool(self, name: str, args: dict[str, Any], result: str, note: str = "") -> None:
        self.calls += 1
        cid = f"call_{self.rng.getrandbits(48):012x}"
        call = {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        self.turns.append({"role": "assistant", "content": note or None, "tool_calls": [call]})
        self.turns.append({"role": "tool", "tool_call_id": cid, "content": result})


def sample_conversation(seed: int = 7, tasks: int = 24) -> list[dict[str, Any]]:
    """A list of OpenAI-style messages: a system prompt, then `tasks` agent tasks (~13 turns each)."""
    rng = random.Random(seed)
    chat = _Chat(rng)
    chat.say("system", SYSTEM)
    for k in range(tasks):
        module = rng.choice(MODULES)
        task = TASKS[k % len(TASKS)]
        chat.say("user", f"Task {k + 1}: {task}")
        chat.say("assistant", f"I'll start by looking at `ledger/{module}.py` and its tests, then reproduce the "
                              f"problem with a failing test before changing anything.")
        chat.tool("read_file", {"path": f"ledger/{module}.py"}, _code(rng, module, rng.randint(3, 6)))
        failed = rng.randint(1, 3)
        chat.tool("run_tests", {"path": f"tests/test_{module}.py", "args": ["-x", "-q"]},
                  _pytest_log(rng, module, failed), note="Running the module's tests first.")
        pattern = '    amount = Decimal(item.get("total", 0))'
        hits = "\n".join(f"ledger/{rng.choice(MODULES)}.py:{rng.randint(1, 400)}:{pattern}"
                         for _ in range(rng.randint(2, 6)))
        chat.tool("grep", {"pattern": "Decimal(item.get", "path": "ledger/"}, hits)
        chat.say("assistant", f"The failure comes from constructing Decimal from a float: {failed} test(s) fail with "
                              f"values off by one cent. The same pattern appears in {hits.count(chr(10)) + 1} places.")
        chat.tool("edit_file", {"path": f"ledger/{module}.py", "diff": "..."}, _diff(rng, module))
        chat.tool("http_get", {"url": f"http://localhost:8000/invoices/{rng.randint(1000, 9999)}"}, _api_json(rng))
        chat.tool("run_tests", {"path": "tests/", "args": ["-q"]}, _pytest_log(rng, module, 0))
        commit = f"{rng.getrandbits(160):040x}"
        chat.say("assistant", f"Done: all tests pass. Commit {commit[:12]} changes ledger/{module}.py "
                              f"({rng.randint(2, 40)} lines). Invoice totals now match the fixtures to the cent.")
        chat.say("user", rng.choice(FOLLOW_UPS))
        chat.say("assistant", "Sure. Here is the test I added:\n```python\n"
                              f"def test_{module}_float_amounts():\n"
                              f"    items = [{{\"total\": 0.1}}, {{\"total\": 0.2}}]\n"
                              f"    assert {module}.compute_total(items) == Decimal(\"0.30\")\n```\n"
                              "It failed before the fix and passes now.")
    return chat.turns


PROSE_MODULES = ("argparse", "collections", "email", "json", "logging", "pathlib", "subprocess", "textwrap",
                 "dataclasses", "functools", "itertools", "unittest", "asyncio", "decimal", "sqlite3")


def prose_corpus(chunk: int = 3000) -> list[str]:
    """English prose that every machine has offline: class docstrings of the standard library,
    whitespace-folded, in chunks of about `chunk` characters."""
    docs = []
    for name in PROSE_MODULES:
        mod = importlib.import_module(name)
        docs += [inspect.getdoc(obj) or "" for _, obj in inspect.getmembers(mod, inspect.isclass)]
    text = "\n\n".join(" ".join(d.split()) for d in docs if len(d) > 200)
    return [text[i : i + chunk] for i in range(0, len(text), chunk)]
