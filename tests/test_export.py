"""Exporters, checked by the SDKs' own request types and by the real clients over loopback."""

from __future__ import annotations

import base64
import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import needs_tesseract
from PIL import Image
from pydantic import TypeAdapter

from optictx import Budget, Memory, Tier
from optictx.schedule import DropOldest

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def ctx(sample):
    mem = Memory(budget=Budget(tokens=6000), keep_recent=6)
    for m in sample[:120]:
        mem.add(m)
    mem.add({"role": "user", "content": [{"type": "text", "text": "and this screenshot"},
                                         {"type": "image_url", "image_url": {"url": _tiny_png_uri()}}]})
    return mem.context()


def _tiny_png_uri() -> str:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def test_openai_shape(ctx):
    msgs = ctx.to_openai()
    assert msgs[0]["role"] == "system"
    pages = msgs[1]
    assert pages["role"] == "user" and pages["content"][0]["type"] == "text"
    assert "rendered as page images, oldest first" in pages["content"][0]["text"]
    images = [p for p in pages["content"] if p["type"] == "image_url"]
    assert len(images) == sum(1 for p in ctx.pages if p.tier.is_image)
    png = base64.b64decode(images[0]["image_url"]["url"].split(",", 1)[1])
    assert Image.open(io.BytesIO(png)).size == (ctx.pages[0].tier.side,) * 2
    from openai.types.chat import ChatCompletionMessageParam

    TypeAdapter(list[ChatCompletionMessageParam]).validate_python(msgs)


def test_anthropic_shape(ctx):
    system, msgs = ctx.to_anthropic()
    assert system.startswith("You are a careful software agent")
    assert msgs[0]["role"] == "user"
    roles = [m["role"] for m in msgs]
    assert all(a != b for a, b in zip(roles, roles[1:])), "roles must alternate"
    uses = {b["id"] for m in msgs for b in m["content"] if b["type"] == "tool_use"}
    results = {b["tool_use_id"] for m in msgs for b in m["content"] if b["type"] == "tool_result"}
    assert results <= uses
    # The SDK's TypedDicts accept incomplete blocks, so check the image blocks by hand as well.
    images = [b for m in msgs for b in m["content"] if b["type"] == "image"]
    assert len(images) == sum(1 for p in ctx.pages if p.tier.is_image) + 1  # + the user's screenshot
    for b in images:  # the pages as optictx sends them, the user's screenshot as it came
        assert b["source"]["type"] == "base64" and b["source"]["media_type"] in ("image/webp", "image/png")
        Image.open(io.BytesIO(base64.b64decode(b["source"]["data"]))).verify()
    assert [b["source"]["media_type"] for b in images].count("image/webp") == len(images) - 1
    assert all(b["text"].strip() for m in msgs for b in m["content"] if b["type"] == "text")
    from anthropic.types import MessageParam

    TypeAdapter(list[MessageParam]).validate_python(msgs)


def _send_json(handler: BaseHTTPRequestHandler, reply: dict) -> None:
    data = json.dumps(reply).encode()
    handler.send_response(200)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _completion(model: str, content: str) -> dict:
    return {"id": "x", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}]}


class _Recorder(BaseHTTPRequestHandler):
    bodies: list[dict] = []

    def log_message(self, *args):  # keep test output clean
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        _Recorder.bodies.append({"path": self.path, "body": body})
        if self.path.endswith("/chat/completions"):
            reply = _completion(body["model"], "ok")
        else:
            reply = {"id": "msg_x", "type": "message", "role": "assistant", "model": body["model"],
                     "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                     "usage": {"input_tokens": 1, "output_tokens": 1}}
        _send_json(self, reply)


@pytest.fixture(scope="module")
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_responses_shape(ctx):
    items = ctx.to_responses()
    assert items[0] == {"role": "system", "content": ctx.text_segments[0].text}
    pages = next(i for i in items if isinstance(i.get("content"), list) and i["content"][0].get("type") == "input_text"
                 and "rendered as page images" in i["content"][0]["text"])
    images = [p for p in pages["content"] if p["type"] == "input_image"]
    assert len(images) == sum(1 for p in ctx.pages if p.tier.is_image)
    assert all(p["image_url"].startswith("data:image/webp;base64,") and p["detail"] for p in images)
    calls = set()
    for item in items:  # every tool output after its call
        if item.get("type") == "function_call":
            calls.add(item["call_id"])
            json.loads(item["arguments"])
        if item.get("type") == "function_call_output":
            assert item["call_id"] in calls
    assert items[-1]["content"][-1] == {"type": "input_image", "image_url": _tiny_png_uri(), "detail": "auto"}
    from openai.types.responses import ResponseInputItemParam

    TypeAdapter(list[ResponseInputItemParam]).validate_python(items)


def test_real_openai_client_sends_the_context(ctx, server):
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="test", max_retries=0)
    out = client.chat.completions.create(model="gpt-4o", messages=ctx.to_openai())
    assert out.choices[0].message.content == "ok"
    sent = _Recorder.bodies[-1]["body"]["messages"]
    assert sent == ctx.to_openai()


def test_real_anthropic_client_sends_the_context(ctx, server):
    client = anthropic.Anthropic(base_url=server, api_key="test", max_retries=0)
    system, messages = ctx.to_anthropic()
    out = client.messages.create(model="claude-x", max_tokens=16, system=system, messages=messages)
    assert out.content[0].text == "ok"
    assert _Recorder.bodies[-1]["body"]["messages"] == messages


def test_text_tier_pages_and_broken_tool_json_export_cleanly():
    mem = Memory(vision="anthropic", budget=Budget(tokens=50000), keep_recent=1, verbatim=False, cache=False)
    mem.add({"role": "user", "content": "hi"})
    mem.add({"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{bad"}}]})
    mem.add({"role": "tool", "tool_call_id": "c1", "content": ""})
    mem.add({"role": "assistant", "tool_calls": [{"id": "c2", "function": {"name": "g", "arguments": "{bad"}}]})
    mem.add({"role": "tool", "tool_call_id": "c2", "content": ""})
    ctx = mem.context()
    assert any(p.tier.value == "text" for p in ctx.pages)
    system, msgs = ctx.to_anthropic()
    uses = [b for m in msgs for b in m["content"] if b["type"] == "tool_use"]
    assert uses and uses[0]["input"] == {"_unparsed_arguments": "{bad"}
    from anthropic.types import MessageParam

    TypeAdapter(list[MessageParam]).validate_python(msgs)


def test_a_factsheet_without_pages_is_still_exported():
    # Pages kept at the ladder's tiers (DropOldest): none fits 300 tokens, so every page is dropped
    # (the default fitter shrinks the newest to TINY, 73 tokens, and sends it).
    mem = Memory(budget=Budget(tokens=300), keep_recent=1, fitter=DropOldest())
    for i in range(40):
        mem.add({"role": "user", "content": f"order {1_000_000 + i} shipped " + "filler words " * 60})
    mem.add({"role": "user", "content": "ok"})
    ctx = mem.context()
    assert not ctx.pages and ctx.gone and "1000039" in ctx.factsheet  # every page dropped, strings kept
    sent = ctx.to_openai()
    assert sent[0]["content"] == [{"type": "text", "text": ctx.factsheet}]  # no caption: no pages
    assert ctx.to_anthropic()[1][0]["content"][0]["text"] == ctx.factsheet


def _run_example(name, env_extra=None, args=()):
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "examples" / name
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPTICTX_")} | (env_extra or {})
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, env=env, timeout=300)


def test_agent_loop_without_endpoint_prints_what_it_would_send():
    out = _run_example("agent_loop.py")
    assert out.returncode == 0, out.stderr
    assert "nothing sent" in out.stdout and "x fewer" in out.stdout


def test_agent_loop_sends_to_an_openai_compatible_endpoint(server):
    n = len(_Recorder.bodies)
    out = _run_example("agent_loop.py", {"OPTICTX_BASE_URL": f"{server}/v1", "OPTICTX_MODEL": "local"})
    assert out.returncode == 0, out.stderr
    sent = _Recorder.bodies[n:]
    assert len(sent) == 3 and all(b["body"]["model"] == "local" for b in sent)
    assert any(p.get("type") == "image_url" for m in sent[0]["body"]["messages"]
               if isinstance(m.get("content"), list) for p in m["content"])


@needs_tesseract
def test_niah_example_runs(tmp_path):
    out = _run_example("niah.py", args=[str(tmp_path)])
    assert out.returncode == 0, out.stderr
    assert "optictx / truncation" in out.stdout and (tmp_path / "heatmap_budget0.25.png").is_file()


def test_quickstart_runs():
    out = _run_example("quickstart.py")
    assert out.returncode == 0, out.stderr
    first = out.stdout.splitlines()[0]  # "601 turns: N tokens as they came, M in the context (P page images, ...)"
    came, sent = (int(first.split()[i]) for i in (2, 7))
    assert sent <= 2000 < came and " 0 page images" not in first  # it shows compression


class _OCRServer(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that 'reads' an image by answering with its pixel size."""

    prompts: list[str] = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        parts = body["messages"][0]["content"]
        _OCRServer.prompts.append(parts[1]["text"])
        png = base64.b64decode(parts[0]["image_url"]["url"].split(",", 1)[1])
        size = Image.open(io.BytesIO(png)).size
        if size[0] == 13:  # a poisoned image: fail like an overloaded server
            self.send_response(500)
            self.end_headers()
            return
        reply = _completion(body["model"], f"{size[0]}x{size[1]}")
        _send_json(self, reply)


def test_openai_reader_against_a_local_server():
    from optictx.readers import OpenAIReader, ReaderError

    srv = ThreadingHTTPServer(("127.0.0.1", 0), _OCRServer)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
        reader = OpenAIReader(url, "deepseek-ai/DeepSeek-OCR", max_retries=0, workers=2)
        images = [Image.new("L", (w, 20), 255) for w in (30, 40, 50)]
        assert reader.read_batch(images) == ["30x20", "40x20", "50x20"]
        assert _OCRServer.prompts[-1] == "Free OCR."
        n = len(_OCRServer.prompts)
        assert reader.read(images[0]) == "30x20" and len(_OCRServer.prompts) == n  # cached
        OpenAIReader(url, "gpt-4o", max_retries=0).read(images[1])
        assert "exactly" in _OCRServer.prompts[-1]
        with pytest.raises(ReaderError, match="failed to read"):
            reader.read(Image.new("L", (13, 13), 255))
    finally:
        srv.shutdown()


def test_a_conversation_that_fits_goes_as_it_came_in_its_own_order():
    mem = Memory(vision="anthropic", budget=Budget(tokens=50_000), keep_recent=1)
    msgs = [{"role": "user", "content": "first"}, {"role": "system", "content": "be brief"},
            {"role": "user", "content": "keep this", "pinned": True}, {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "second"}]
    for m in msgs:
        mem.add(m)
    ctx = mem.context()
    assert ctx.verbatim and not ctx.pages
    assert ctx.to_openai() == [t.to_openai() for t in mem.transcript()]
    system, messages = ctx.to_anthropic()
    # A system turn after the conversation began stays where it was (a user message, as the
    # Messages API takes no system role there without a beta), not hoisted into the system prompt.
    assert system == ""
    assert [b["text"] for m in messages for b in m["content"]] == ["first", "be brief", "keep this", "ok", "second"]
    assert mem.context(budget=ctx.tokens - 1).tokens < ctx.tokens  # one token less: compressed


@pytest.mark.parametrize("kept", [10**9, 30])
def test_a_long_conversation_goes_as_it_came_whether_or_not_it_is_kept_in_ram(sample, tmp_path, monkeypatch, kept):
    """A conversation is kept whole in RAM while it is small (`resident.KEPT_TOKENS`), read back
    from the store past that: either way, the same context, another writer's turns included."""
    from optictx import resident

    monkeypatch.setattr(resident, "KEPT_TOKENS", kept)
    mem = Memory(budget=Budget(tokens=200_000), store=tmp_path / "m.db")
    other = Memory.open(tmp_path / "m.db")
    for i, m in enumerate(sample[:120]):
        (other if i % 3 == 0 else mem).add(m)
    ctx = mem.context()
    assert ctx.verbatim and ctx.to_openai() == [t.to_openai() for t in mem.transcript()]
    assert ctx.to_openai() == other.context().to_openai()


def test_more_native_images_than_the_provider_takes_is_compressed_never_costlier():
    part = {"type": "image_url", "image_url": {"url": _tiny_png_uri()}}
    mem = Memory(vision="anthropic", budget=Budget(tokens=400_000), keep_recent=1)
    for i in range(101):  # Anthropic takes 100 images per request
        mem.add({"role": "user", "content": [{"type": "text", "text": f"picture {i}"}, part]})
    original = sum(mem.tokenizer.count(t.text) for t in mem.transcript()) + 101 * mem.vision.image_tokens(
        Tier.GUNDAM, (8, 8))
    ctx = mem.context()
    assert not ctx.verbatim and ctx.tokens <= original
    sent = sum(1 for m in ctx.to_openai() if isinstance(m["content"], list)
               for p in m["content"] if p["type"] == "image_url")
    assert sent <= 100
