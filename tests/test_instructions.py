"""`--image-instructions`: a request's system prompt prose and tool descriptions drawn on pages
that open its first user message. Oracles: the client's own body (what must stay as it came is
compared with it), the text the pages were drawn from (read back by Tesseract), and the wire
(`optictx bill`'s request-by-request replay against every request written whole)."""

from __future__ import annotations

import base64
import copy
import io
import json

import pytest
from conftest import needs_tesseract
from PIL import Image

from optictx.instructions import draw
from optictx.sample import prose_corpus, sample_conversation
from optictx.serve.instructions import HEAD, MIN_SYSTEM, POINTER, STUB, Instructions
from optictx.tools import ABOUT

PROSE = prose_corpus()
SYSTEM = "\n\n".join(PROSE[:8])  # about 24,000 characters of the standard library's docstrings
LONG, SHORT = PROSE[5][:1500], "Runs a command."
SCHEMA = {"type": "object", "properties": {"command": {"type": "string", "description": "what to run"}},
          "required": ["command"]}


def _anthropic() -> dict:
    return {"model": "claude-sonnet-4-5", "max_tokens": 100,
            "system": [{"type": "text", "text": "billing: v1"}, {"type": "text", "text": "You are an agent."},
                       {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "Bash", "description": LONG, "input_schema": SCHEMA},
                      {"name": "Tiny", "description": SHORT, "input_schema": SCHEMA},
                      {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
                      {"name": "Later", "description": LONG, "input_schema": SCHEMA, "defer_loading": True},
                      {"name": "mcp__optictx__recall", "description": ABOUT + " " + LONG, "input_schema": SCHEMA}],
            "messages": [{"role": "user", "content": "Fix the build."},
                         {"role": "assistant", "content": "On it."},
                         {"role": "user", "content": [{"type": "text", "text": "go",
                                                       "cache_control": {"type": "ephemeral"}}]}]}


def _chat() -> dict:
    return {"model": "gpt-5", "messages": [{"role": "system", "content": SYSTEM},
                                          {"role": "user", "content": "Fix the build."},
                                          {"role": "assistant", "content": "On it."}],
            "tools": [{"type": "function", "function": {"name": "Bash", "description": LONG, "parameters": SCHEMA}},
                      {"type": "function", "function": {"name": "Tiny", "description": SHORT, "parameters": SCHEMA}}]}


def _responses() -> dict:
    return {"model": "gpt-5", "instructions": SYSTEM,
            "input": [{"type": "message", "role": "developer",
                       "content": [{"type": "input_text", "text": "be brief"}]},
                      {"type": "message", "role": "user",
                       "content": [{"type": "input_text", "text": "Fix the build."}]}],
            "tools": [{"type": "function", "name": "Bash", "description": LONG, "parameters": SCHEMA},
                      {"type": "namespace", "name": "mcp__x", "tools": [{"name": "a", "description": LONG}]},
                      {"type": "web_search"}]}


def _spec(api: str, tool: dict) -> dict:
    return tool.get("function", tool) if api == "openai" else tool


@pytest.mark.parametrize(("api", "vision", "make", "key", "drawn"), [
    ("anthropic", "anthropic", _anthropic, "messages", {"Bash"}),
    ("openai", "openai:gpt-5", _chat, "messages", {"Bash"}),
    ("responses", "openai:gpt-5", _responses, "input", {"Bash"}),
])
def test_the_instructions_go_on_pages_and_the_rest_stays_as_the_client_sent_it(api, vision, make, key, drawn):
    body = make()
    kept = copy.deepcopy(body)
    front = Instructions(api, vision)
    out = front(body)
    assert body == kept, "the client's body is not written into"
    # Tools: same names, same schemas, in order; a long description of a tool of the client's
    # own becomes the line naming its section, anything else stays as it came.
    assert len(out["tools"]) == len(body["tools"])
    for before, after in zip(body["tools"], out["tools"]):
        a, b = _spec(api, before), _spec(api, after)
        if before.get("type") == "namespace":  # Codex's: each tool in it as any tool
            assert after == {**before, "tools": [{"name": "a", "description": STUB.format(name="mcp__x.a")}]}
        elif a.get("name") in drawn:
            assert b == {**a, "description": STUB.format(name=a["name"])}
            assert after.keys() == before.keys()
        else:
            assert after == before
    # The first user message: the pages, then what the client wrote, as it wrote it.
    user = next(i for i, m in enumerate(body[key]) if m.get("role") == "user")
    assert out[key][:user] == body[key][:user] or api == "openai"
    assert out[key][user + 1 :] == body[key][user + 1 :]
    content = out[key][user]["content"]
    images = [p for p in content if p["type"] in ("image", "image_url", "input_image")]
    assert len(images) == front.pages >= 1
    assert content[0]["text"] == HEAD.format(n=front.pages)
    theirs = body[key][user]["content"]
    assert content[1 + front.pages :] == ([{"type": "text", "text": theirs}] if isinstance(theirs, str) else theirs)
    assert front.moved > 0
    # The system prompt: its long text gone, the pointer in its place.
    if api == "anthropic":
        assert out["system"][:2] == body["system"][:2]
        assert out["system"][2] == {"type": "text", "text": POINTER, "cache_control": {"type": "ephemeral"}}
    elif api == "responses":
        assert out["instructions"] == POINTER and out[key][0] == body[key][0]
    else:
        assert out[key][0] == {"role": "system", "content": POINTER}
    assert json.dumps(Instructions(api, vision)(make())) == json.dumps(out), "the same bytes on every call"


def test_instructions_that_would_cost_more_drawn_stay_text():
    body = _anthropic()
    body["system"] = [{"type": "text", "text": PROSE[0][:MIN_SYSTEM + 200]}]  # one page costs more than this
    body["tools"] = [t for t in body["tools"] if t.get("name") != "Bash"]
    front = Instructions("anthropic", "anthropic")
    assert front(body) is body and front.moved == 0
    short = {**_anthropic(), "system": "Be brief.", "tools": []}
    assert Instructions("anthropic", "anthropic")(short) is short


@pytest.mark.parametrize("vision", ["anthropic", "openai:gpt-5", "deepseek-ocr"])
def test_the_pages_draw_every_word(vision):
    sections = [("INSTRUCTIONS", SYSTEM), ("TOOL Bash", LONG)]
    drawn = draw(sections, vision)
    shown = [line.text for page in drawn.lines for line in page]
    def ink(texts):  # every character drawn, in order (a word wider than a column is split, not lost)
        return "".join("".join(texts).split())

    assert ink(shown) == ink(f"{t} {x}" for t, x in sections)
    assert len(drawn.images) == len(drawn.sizes) == len(drawn.lines) >= 2


@needs_tesseract
@pytest.mark.parametrize("vision", ["anthropic", "openai:gpt-5"])
def test_the_pages_read_back(vision):
    from optictx.readers import TesseractReader, char_accuracy

    drawn = draw([("INSTRUCTIONS", SYSTEM), ("TOOL Bash", LONG)], vision)
    for data, size in zip(drawn.images, drawn.sizes):
        assert Image.open(io.BytesIO(base64.b64decode(data))).size == size
    pairs = drawn.read(TesseractReader())
    assert sum(char_accuracy(truth, read) * len(truth) for truth, read in pairs) / sum(len(t) for t, _ in pairs) >= 0.98


def test_the_last_page_is_no_taller_than_its_lines():
    drawn = draw([("INSTRUCTIONS", PROSE[0][:3000])], "anthropic")
    assert len(drawn.images) == 1 and drawn.sizes[0][0] == 1092 and drawn.sizes[0][1] < 600


@pytest.mark.parametrize("provider", ["anthropic", "openai:gpt-5"])
def test_a_bill_with_instructions_drawn_is_the_wire_s_and_cheaper(tmp_path, provider):
    pytest.importorskip("starlette", reason="optictx bill replays through the proxy (the serve extra)")
    from optictx.eval.bill import replay
    from optictx.eval.sessions import load_session

    path = tmp_path / "s.jsonl"
    messages = [{"role": "system", "content": SYSTEM}, *sample_conversation(tasks=5)]
    path.write_text("".join(json.dumps(m) + "\n" for m in messages))
    session = load_session(path)
    for budget in (None, 6000):
        grown = replay(session, provider, budget=budget, image_instructions=True)
        assert grown.rows == replay(session, provider, budget=budget, image_instructions=True, wire=True).rows
        plain = replay(session, provider, budget=budget)
        assert [r.passthrough_cost for r in grown.rows] == [r.passthrough_cost for r in plain.rows]
        assert grown.optictx < plain.optictx
        assert all(r.optictx_tokens < r.passthrough_tokens for r in grown.rows)


def test_pages_that_would_pass_the_image_cap_stay_text():
    """Anthropic takes 100 images a request: where the conversation's own leave no room for the
    pages (a memory made before the option, which kept none), the instructions stay text."""
    pages = Instructions("anthropic", "anthropic")
    pages(_anthropic())
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    for room, drawn in ((0, True), (1, False)):
        body = _anthropic()
        body["messages"][2]["content"] = [{"type": "tool_result", "tool_use_id": "x", "content": [image]},
                                          *[image] * (99 - pages.pages + room)]
        front = Instructions("anthropic", "anthropic")
        assert (front(body) is not body) is drawn


def test_a_memory_made_with_the_option_leaves_room_for_the_pages():
    """Under Anthropic's 100 images, the proxy's memories keep MAX_PAGES free for instruction pages
    when the option is on (then nothing needs counting); a memory made without it does not."""
    pytest.importorskip("starlette", reason="the proxy (the serve extra)")
    from optictx.serve.config import ServeConfig
    from optictx.serve.instructions import MAX_PAGES
    from optictx.serve.proxy import Proxy, _room

    for on in (True, False):
        proxy = Proxy(ServeConfig.make(anthropic_upstream="http://127.0.0.1:9", image_instructions=on))
        memory = proxy.memory(None, "anthropic")
        assert memory.policy.limits.image_cap(100) == (100 - MAX_PAGES if on else 100)
        assert _room(memory, "anthropic") is on and _room(memory, "openai:gpt-5")  # gpt-5: no cap
        proxy.close()


def _marked(blocks) -> int:
    return sum(1 for b in blocks or [] if isinstance(b, dict) and "cache_control" in b)


def test_the_last_page_is_a_cache_breakpoint_where_the_client_leaves_one():
    """Anthropic reads a cached prefix only up to a block a request marks: the last page is
    marked, so that a compaction (which changes what follows the pages) reads them back, unless
    the client's own marks already take the four a request may have. No other API is marked."""
    out = Instructions("anthropic", "anthropic")(_anthropic())
    content = out["messages"][0]["content"]
    pages = [i for i, p in enumerate(content) if p["type"] == "image"]
    assert [i for i, p in enumerate(content) if "cache_control" in p] == [pages[-1]]
    full = _anthropic()
    full["tools"][0]["cache_control"] = full["system"][0]["cache_control"] = {"type": "ephemeral"}
    out = Instructions("anthropic", "anthropic")(full)
    assert _marked(out["tools"]) + _marked(out["system"]) + sum(_marked(m["content"]) for m in out["messages"]
                                                                if isinstance(m["content"], list)) == 4
    assert _marked(out["messages"][0]["content"]) == 0
    for api, make, key in (("openai", _chat, "messages"), ("responses", _responses, "input")):
        assert "cache_control" not in json.dumps(Instructions(api, "openai:gpt-5")(make())[key])


def test_every_request_through_the_proxy_can_read_the_pages_back(tmp_path):
    """A session long enough for compactions, through the proxy with the option: every body it
    sends upstream has the same bytes up to and including the last instruction page, the first
    a breakpoint on that page, each a breakpoint at most 20 blocks after it, and none more than
    four: by Anthropic's rules (a request reads the longest cached prefix ending at a breakpoint,
    looking back about 20 blocks), the pages are read from the cache on every request after the
    first, compactions included."""
    pytest.importorskip("starlette", reason="the proxy (the serve extra)")
    from optictx.eval.requests import Requests
    from optictx.eval.sessions import load_session
    from optictx.serve.anthropic_api import ANTHROPIC
    from optictx.serve.config import ServeConfig
    from optictx.serve.guards import read
    from optictx.serve.proxy import Proxy

    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in [{"role": "system", "content": SYSTEM},
                                                           *sample_conversation(tasks=5)]))
    session = load_session(path)
    requests = Requests(session, "anthropic", "claude-sonnet-4-5")
    proxy = Proxy(ServeConfig.make(anthropic_upstream="http://127.0.0.1:9", image_instructions=True))
    fronts, events = set(), []
    try:
        for k in range(len(session.calls)):
            requests.to(k)
            fitted = proxy.fit(ANTHROPIC, read(ANTHROPIC, json.dumps(requests.body()).encode()),
                               {"x-api-key": "k", "x-optictx-budget": "6000"}, at=60.0 * k)
            body = json.loads(fitted.body)
            events.append(fitted.context.event if fitted.context is not None else None)
            blocks = [*body["system"], *(b for m in body["messages"] for b in
                                         (m["content"] if isinstance(m["content"], list) else [m["content"]]))]
            marks = [i for i, b in enumerate(blocks) if isinstance(b, dict) and "cache_control" in b]
            front = Instructions("anthropic", "anthropic")
            front(requests.body())
            page = len(body["system"]) + front.pages  # the system blocks, the line before the pages, the pages
            assert k > 0 or page in marks
            assert any(page <= i <= page + 20 for i in marks) and len(marks) <= 4
            fronts.add(json.dumps([body.get("tools"), [{key: v for key, v in b.items() if key != "cache_control"}
                                                       for b in blocks[: page + 1]]]))  # a mark is no content
    finally:
        proxy.close()
    assert len(fronts) == 1
    assert {"paid", "forced"} & set(events), events
