"""Hostile input, class by class: each case is exported correctly or refused with a clear
OptictxError subclass whose message names the field or the file. No case accepts "any exception"."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from optictx import Budget, ConfigError, Limits, Memory, Tier, Turn, TurnError, TurnTooLargeError
from optictx.errors import ConversationFileError
from optictx.io import read_jsonl
from optictx.store import SQLiteStore

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _nested(depth: int, leaf: object = 1) -> object:
    out = leaf
    for _ in range(depth):
        out = {"a": out}
    return out


def _exports(mem: Memory, **kw) -> tuple[list, tuple]:
    ctx = mem.context(**kw)
    openai = ctx.to_openai()
    system, messages = ctx.to_anthropic()
    json.dumps(openai), json.dumps(messages)  # serializable as sent
    for m in messages:
        assert m["content"], m  # the Anthropic API rejects empty content
        for block in m["content"]:
            if block["type"] == "text":
                assert block["text"].strip()
    return openai, messages


# -- 1. accepted input always exports ----------------------------------------------------------------

IMAGE_PARTS = [
    {"type": "image_url", "image_url": "https://x/a.png"},  # a bare string, as some clients send
    {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
    {"type": "image_url", "image_url": {"url": "ftp://x/a.png"}},
    {"type": "image_url", "image_url": {}},
    {"type": "image_url"},
    {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
    {"type": "text", "text": ""},
]


@pytest.mark.parametrize("part", IMAGE_PARTS, ids=lambda p: json.dumps(p)[:40])
def test_content_parts_add_accepts_also_export(part):
    mem = Memory(vision="anthropic", budget=Budget(tokens=50_000))
    mem.add({"role": "user", "content": [part]})
    openai, messages = _exports(mem)
    assert openai[-1]["content"] == [part]  # the client's own part, as it came
    block = messages[-1]["content"][0]
    url = part.get("image_url")
    url = url if isinstance(url, str) else (url or {}).get("url", "")
    if url.startswith("https://"):
        assert block == {"type": "image", "source": {"type": "url", "url": url}}
    elif url.startswith("data:"):
        assert block["source"]["type"] == "base64"
    else:
        assert block["type"] == "text"


@pytest.mark.parametrize("content", [[], "", "   ", [{"type": "text", "text": " "}]])
def test_empty_content_exports_as_a_non_empty_anthropic_message(content):
    mem = Memory(budget=Budget(tokens=50_000))
    mem.add({"role": "user", "content": content})
    mem.add({"role": "assistant", "content": content})
    _exports(mem)


@pytest.mark.parametrize("depth", [70, 1_000, 5_000])
def test_tool_arguments_nested_deep_as_text_export_unparsed(depth):
    args = json.dumps(_nested(min(depth, 900))) if depth < 1000 else "[" * depth + "]" * depth
    mem = Memory(budget=Budget(tokens=200_000))
    mem.add({"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}}]})
    mem.add({"role": "tool", "tool_call_id": "c1", "content": "ok"})
    _, messages = _exports(mem)
    use = next(b for m in messages for b in m["content"] if b["type"] == "tool_use")
    assert use["input"] == {"_unparsed_arguments": args}  # nested past what `check_json` admits: kept as text


# -- 2. recursion and depth ----------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [65, 2_000, 50_000])
def test_structured_tool_arguments_nested_too_deep_are_refused_by_name(depth):
    with pytest.raises(TurnError, match=r"tool_calls\.0\.function\.arguments.*nested more than 64"):
        Memory().add({"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": _nested(depth)}}]})


@pytest.mark.parametrize("depth", [100, 100_000])
def test_a_conversation_file_nested_too_deep_is_a_clear_error(tmp_path, depth):
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps({"role": "user", "content": "ok"}) + "\n" + "[" * depth + "]" * depth + "\n")
    with pytest.raises(ConversationFileError, match=r"deep.jsonl:2: "):
        read_jsonl(path)


# -- 3. a Turn object is validated like a dict; nothing unreadable is committed ----------------------

@pytest.mark.parametrize("update", [{"role": "tool"}, {"tool_call_id": "x"}, {"role": "bot"}, {"pinned": 3},
                                    {"content": 5}, {"metadata": {"k": object()}}])
def test_an_invalid_turn_object_is_refused_and_the_store_stays_openable(tmp_path, update):
    path = tmp_path / "m.db"
    mem = Memory(store=path)
    mem.add({"role": "user", "content": "kept"})
    with pytest.raises(TurnError, match="turn"):
        mem.add(Turn(role="user", content="x").model_copy(update=update))
    mem.close()
    again = Memory.open(path)
    assert [t.content for t in again.transcript()] == ["kept"]


# -- 4. limits cover every field ------------------------------------------------------------------------

@pytest.mark.parametrize("turn", [
    {"role": "user", "content": "x", "name": "n" * 100},
    {"role": "user", "content": "x", "metadata": {"k": "v" * 100}},
    {"role": "user", "content": "x", "unknown_key": "u" * 100},
    {"role": "tool", "tool_call_id": "i" * 100, "content": "x"},
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": "i" * 100, "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
], ids=["name", "metadata", "unknown", "tool_call_id", "call id"])
def test_every_field_counts_against_max_turn_chars(turn):
    with pytest.raises(TurnTooLargeError, match="max_turn_chars=50"):
        Memory(limits=Limits(max_turn_chars=50)).add(turn)


# -- 7. settings ------------------------------------------------------------------------------------------

def test_an_int_budget_is_a_token_budget_everywhere():
    mem = Memory(budget=3000)
    mem.add({"role": "user", "content": "hi"})
    assert mem.budget == Budget(tokens=3000) and mem.context().budget.limit == 3000 - 0
    assert mem.context(budget=1500).budget == Budget(tokens=1500)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"budget": "8192"}, "budget"), ({"budget": 0}, "budget"), ({"budget": True}, "budget"),
    ({"tokens_per_page": 0}, "tokens_per_page"), ({"tokens_per_page": -5}, "tokens_per_page"),
    ({"tokens_per_page": 10**9}, "tokens_per_page"), ({"keep_recent": -1}, "keep_recent"),
    ({"keep_recent": 1.5}, "keep_recent"), ({"vision": "gpt-9"}, "vision"), ({"vision": 3}, "vision"),
    ({"image_cache_bytes": -1}, "image_cache_bytes"), ({"ladder": "age"}, "ladder"),
    ({"fitter": 3}, "fitter"), ({"factsheet": "on"}, "factsheet"), ({"limits": {}}, "limits"),
    ({"sticky_tiers": "yes"}, "sticky"), ({"render": 5}, "render"), ({"tokenizer": 5}, "tokenizer"),
])
def test_out_of_range_settings_are_refused_at_construction_by_name(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        Memory(**kwargs)


# -- 8. command line ---------------------------------------------------------------------------------------

def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "optictx", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def test_jsonl_with_unicode_line_separators_inside_strings_is_read(tmp_path):
    path = tmp_path / "c.jsonl"
    texts = ["a\u2028b", "c\u0085d", "e\u2029f\x1cg"]
    path.write_text("\n".join(json.dumps({"role": "user", "content": t}, ensure_ascii=False) for t in texts) + "\n",
                    encoding="utf-8")
    assert [t.content for t in read_jsonl(path)] == texts


def test_plan_output_escapes_terminal_control_characters(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"role": "user", "content": "\x1b[2J\x1b]0;pwned\x07 hi \x9b31m"}) + "\n")
    out = _cli("plan", str(path))
    assert out.returncode == 0, out.stderr
    assert not any(c in out.stdout for c in "\x1b\x07\x9b")


@pytest.mark.parametrize("cmd", ["render", "demo"])
def test_out_naming_a_file_is_a_one_line_error(tmp_path, cmd):
    conv = tmp_path / "c.jsonl"
    conv.write_text(json.dumps({"role": "user", "content": "hi"}) + "\n")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    args = ["render", str(conv), "--out", str(blocker)] if cmd == "render" else ["demo", "--out", str(blocker)]
    out = _cli(*args)
    assert out.returncode == 2
    assert out.stderr.startswith("optictx: error: ") and out.stderr.count("\n") == 1, out.stderr
    assert "Traceback" not in out.stderr and str(blocker) in out.stderr


def test_a_cli_file_nested_100k_deep_is_one_line_exit_2(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    out = _cli("plan", str(path))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "deep.jsonl:1" in out.stderr, out.stderr


# -- generated: nested JSON and content parts -----------------------------------------------------------

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids,
                                                                                      max_size=3),
                           max_leaves=30)
parts = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=40)),
    st.builds(lambda u: {"type": "image_url", "image_url": u},
              st.one_of(st.text(max_size=30), st.builds(lambda x: {"url": x}, st.text(max_size=30)),
                        st.sampled_from(["https://h/i.png", {"url": "data:image/png;base64,AAAA"}]))),
    st.builds(lambda k, v: {"type": k, "v": v}, st.text(min_size=1, max_size=10), json_values),
)


@PROPS
@given(st.lists(st.lists(parts, max_size=4), min_size=1, max_size=6), json_values,
       st.sampled_from(["anthropic", "openai:gpt-4o", "deepseek-ocr"]), st.integers(200, 20_000))
def test_generated_content_parts_and_arguments_export_or_are_refused_by_name(contents, args, vision, budget):
    mem = Memory(vision=vision, budget=Budget(tokens=budget), keep_recent=2, tokens_per_page=200)
    call = {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": args}}]}
    if not isinstance(args, (str, dict, list)):  # OpenAI sends JSON text; parsed objects are dumped
        with pytest.raises(TurnError, match=r"tool_calls\.0\.function\.arguments"):
            mem.add(call)
        args = json.dumps(args)
    for i, content in enumerate(contents):
        mem.add({"role": "user", "content": content})
        mem.add({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": args}}]})
        mem.add({"role": "tool", "tool_call_id": f"c{i}", "content": content})
    ctx = mem.context()
    assert ctx.tokens <= budget
    _exports(mem)


def _deep_turn(where: int, depth: int) -> dict:
    deep = _nested(depth)
    return [{"role": "user", "content": [{"type": "data", "v": deep}]},
            {"role": "user", "content": "x", "metadata": deep},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": deep}}]},
            {"role": "user", "content": "x", "extra_field": deep}][where]


@PROPS
@given(st.integers(0, 3), st.integers(65, 3_000))
def test_generated_deep_nesting_anywhere_in_a_turn_is_refused(where, depth):
    with pytest.raises(TurnError, match="nested more than 64"):
        Memory().add(_deep_turn(where, depth))


@pytest.mark.parametrize("where", range(4))
def test_nesting_within_the_limit_is_stored_and_exported(where):
    mem = Memory()
    mem.add(_deep_turn(where, 50))
    _exports(mem)


# -- 5. client images in turns kept as text ---------------------------------------------------------

def _png(side: int) -> str:
    import base64
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (side, side), 255).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def test_native_images_are_priced_by_the_cost_model_and_count_in_the_budget():
    from optictx import COST_MODELS

    claude = COST_MODELS["anthropic"]
    mem = Memory(vision="anthropic", budget=Budget(tokens=400_000), keep_recent=200)
    for i in range(150):  # 150 images of 1280 px: ~1,590 tokens each under Claude
        mem.add({"role": "user", "content": [{"type": "text", "text": f"look {i}"},
                                             {"type": "image_url", "image_url": {"url": _png(1280)}}]})
    ctx = mem.context()
    native = [s for s in ctx.text_segments if s.kind == "recent"]
    each = claude.image_tokens(Tier.GUNDAM, (1280, 1280))
    assert each > 1500 and all(s.tokens >= each for s in native)
    assert ctx.tokens == sum(s.tokens for s in ctx.segments) <= 400_000
    # Anthropic takes 100 images per request: the oldest turns went onto pages (drawn as "[image]").
    sent = sum(1 for m in ctx.to_anthropic()[1] for b in m["content"] if b["type"] == "image")
    assert sent <= 100 and len(native) <= 100 < 150
    assert any("[image]" in p.text for p in ctx.pages)


def test_a_budget_too_small_for_native_images_moves_their_turns_onto_pages():
    mem = Memory(vision="openai:gpt-4o", budget=Budget(tokens=3000), keep_recent=10)
    for _ in range(10):
        mem.add({"role": "user", "content": [{"type": "image_url", "image_url": {"url": _png(1024)}}]})
    ctx = mem.context()
    assert ctx.tokens <= 3000
    assert sum(1 for s in ctx.text_segments if s.kind == "recent") < 10  # priced, so not all fit natively


def test_images_of_unknown_size_are_priced_as_the_largest_and_pinned_images_over_the_cap_refused():
    from optictx import COST_MODELS, BudgetError
    from optictx.native import UNKNOWN_SIZE, image_sizes

    turn = Turn(role="user", content=[{"type": "image_url", "image_url": {"url": "https://h/x.png"}},
                                      {"type": "image_url", "image_url": {"url": "data:image/png;base64,!!"}}])
    assert image_sizes(turn) == (None, None)
    mem = Memory(vision="anthropic", budget=Budget(tokens=50_000))
    mem.add(turn)
    assert mem.context().text_segments[-1].tokens >= 2 * COST_MODELS["anthropic"].image_tokens(Tier.GUNDAM,
                                                                                             UNKNOWN_SIZE)
    capped = Memory(vision="anthropic", limits=Limits(max_images=1))
    capped.add(turn.model_copy(update={"pinned": True}))
    with pytest.raises(BudgetError, match="2 images.*at most 1"):
        capped.context()


def test_the_images_cap_keeps_its_old_name_for_callers_and_stored_settings(tmp_path):
    assert Limits(max_pages=2) == Limits(max_images=2)  # `max_pages` was its name: it caps client images too
    path = tmp_path / "old.db"
    Memory(store=path, limits=Limits(max_images=3)).close()
    store = SQLiteStore(path)
    meta = store.get_meta()
    meta["limits"] = {("max_pages" if k == "max_images" else k): v for k, v in meta["limits"].items()}
    store.set_meta(meta)  # settings as an earlier version stored them
    store.close()
    with Memory.open(path) as again:
        assert again.limits.max_images == 3
