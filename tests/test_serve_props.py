"""What the proxy writes upstream, as properties over random conversations, budgets and cost
models: a request each API takes (roles, tool pairs, cache breakpoints) that never costs more
than the messages as they came, and is them, byte for byte, when they fit."""

from __future__ import annotations

import json

from conftest import conversations, needs
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

pytestmark = [needs("starlette", "serve"), needs("httpx", "serve")]

from optictx import COST_MODELS, BudgetError, Memory  # noqa: E402
from optictx.serve.anthropic_api import ANTHROPIC, MAX_BREAKPOINTS  # noqa: E402
from optictx.serve.dialect import NOTHING_FITS  # noqa: E402
from optictx.serve.openai_api import OPENAI  # noqa: E402
from optictx.serve.proxy import fit  # noqa: E402

PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _anthropic_body(messages):
    """OpenAI-style messages as an Anthropic request (pins dropped: the API has none)."""
    system, out = [], []
    for m in messages:
        if m["role"] == "system":
            system.append(m["content"])
            continue
        if m["role"] == "tool":
            role, blocks = "user", [{"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}]
        else:
            role = m["role"]
            blocks = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            blocks += [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                        "input": json.loads(c["function"]["arguments"])} for c in m.get("tool_calls") or []]
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"] += blocks
        else:
            out.append({"role": role, "content": blocks})
    if not out or out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": "start"})
    body = {"model": "m", "max_tokens": 10, "messages": out}
    if "".join(system):
        body["system"] = "\n".join(system)
    return body


def _fitted(dialect, body, budget, vision):
    raw = json.dumps(body).encode()
    parsed = dialect.parse(json.loads(raw), raw)
    mem = Memory(keep_recent=2, budget=budget)
    for t in parsed.turns:
        mem.add(t)
    sent, ctx = fit(mem, dialect, parsed, budget, vision)
    return raw, sent, ctx, mem.original_tokens(vision)


def _compressed(dialect, body, budget, vision):
    """The fitted request as JSON, once the invariants every request keeps are checked; None when
    it went as it came (then byte for byte) or the budget refused it (a system prompt over it:
    the proxy sends it as it came then, tests/test_serve.py)."""
    try:
        raw, sent, ctx, original = _fitted(dialect, body, budget, vision)
    except BudgetError:
        return None
    assert ctx.tokens <= original
    event("verbatim" if ctx.verbatim else "compressed")
    if ctx.verbatim:
        assert sent == raw
        return None
    assert ctx.tokens <= budget
    return json.loads(sent)


bodies = st.tuples(conversations(), st.integers(100, 4000), st.sampled_from(list(COST_MODELS)))


@PROPS
@given(bodies)
def test_anthropic_requests_are_valid_never_costlier_and_as_they_came_when_they_fit(case):
    msgs, budget, vision = case
    out = _compressed(ANTHROPIC, _anthropic_body([m for m in msgs if not m.get("pinned")]), budget, vision)
    if out is None:
        return
    roles = [m["role"] for m in out["messages"]]  # never none: the API refuses that
    assert roles[0] == "user" and all(a != b for a, b in zip(roles, roles[1:]))
    for before, m in zip([None, *out["messages"]], out["messages"]):
        results = [b["tool_use_id"] for b in m["content"] if isinstance(b, dict) and b["type"] == "tool_result"]
        if results:  # each answers a tool_use of the message right before it
            uses = {b["id"] for b in before["content"] if b["type"] == "tool_use"}
            assert set(results) <= uses
    blocks = [*(out.get("system") if isinstance(out.get("system"), list) else []),
              *(b for m in out["messages"] if isinstance(m["content"], list) for b in m["content"])]
    assert sum("cache_control" in b for b in blocks) <= MAX_BREAKPOINTS


# A conversation a token over its budget as it came, where not even the person's words fit
# (hypothesis found it): the one message that goes then is the proxy's own.
OVER = "\u7301\u1802\u1802\u0172" + "\u1802" * 20 + "\u1b82\U0001d42c\U0001d42d\uee17\uee17" + \
    "\U0001d42f\U0001d430\U0001d431\U0001d432\U0001d433"


@PROPS
@given(bodies)
@example(([{"role": "user", "content": ""}, {"role": "user", "content": OVER}], 100, "deepseek-ocr"))
def test_openai_requests_keep_tool_pairs_never_costlier_and_as_they_came_when_they_fit(case):
    msgs, budget, vision = case
    body = {"model": "m", "messages": [{k: v for k, v in m.items() if k != "pinned"} for m in msgs]
            or [{"role": "user", "content": "hi"}]}
    fitted = _compressed(OPENAI, body, budget, vision)
    if fitted is None:
        return
    out = fitted["messages"]
    assert out  # never none: the API refuses that
    for i, m in enumerate(out):
        if m["role"] == "tool":  # right after its call, or after the results of the same call
            j = i - 1
            while out[j]["role"] == "tool":
                j -= 1
            assert m["tool_call_id"] in {c["id"] for c in out[j].get("tool_calls") or []}
    kept = [m for m in out if not (isinstance(m.get("content"), list) and any(
        p.get("type") == "image_url" for p in m["content"]))]
    originals = [json.dumps(m, sort_keys=True) for m in body["messages"]]
    if out == [{"role": "user", "content": NOTHING_FITS.format(budget=budget)}]:
        return  # not even the person's words fit (the conversation is over the budget as it came)
    for m in kept:  # a turn that stays text goes as the client wrote it
        if m["role"] != "user" or not isinstance(m.get("content"), list):
            assert json.dumps(m, sort_keys=True) in originals
