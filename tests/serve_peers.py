"""The peers of `optictx serve` in tests: a small real upstream on 127.0.0.1 that speaks the
OpenAI (Chat Completions and Responses) and Anthropic APIs (the only fake, at the network
boundary: it records what arrives and answers, streamed or not), and the proxy itself on
uvicorn, on 127.0.0.1, both in threads with bounded request loops."""

from __future__ import annotations

import base64
import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import uvicorn

from optictx.serve import ServeConfig, create_app
from optictx.serve.wire import uvicorn_config

MAX_REQUESTS = 5000  # each server stops by itself after this many


@dataclass
class Arrival:
    path: str
    headers: dict[str, str]
    raw: bytes

    @property
    def body(self) -> dict[str, Any]:
        return json.loads(self.raw)


@dataclass
class Upstream:
    """What arrived, in order; `fail` (status, headers) answers the next request with an error;
    `break_stream` cuts the next stream after its first event."""

    port: int = 0
    arrivals: list[Arrival] = field(default_factory=list)
    fail: tuple[int, dict[str, str]] | None = None
    break_stream: bool = False
    delay: float = 0.0  # seconds before each answer
    keep: bool = True  # False (benchmarks): nothing recorded or parsed, every POST gets one fixed answer
    reply: str = "Hello from upstream, streamed in pieces."
    stream_body: bytes | None = None  # sent as the next streams' body, as it is (no events), 64 KiB a chunk
    whole_body: bytes | None = None  # sent as the next whole answers' body, as it is
    headers: dict[str, str] = field(default_factory=dict)  # sent with every whole answer
    calls: list[tuple[str, Any]] = field(default_factory=list)  # Responses API: the next answers are these
    #   function calls (name, arguments or a function of the request that gives them), each after an
    #   encrypted reasoning item, one per request
    tool_uses: list[tuple[str, Any]] = field(default_factory=list)  # Messages API: the next
    #   answers to requests that offer that tool are these tool_use blocks (name, input, or a function of
    #   the request that gives the input), streamed
    lock: threading.Lock = field(default_factory=threading.Lock)
    cache: Any = None  # a `provider_cache.AnthropicCache` or `OpenAICache`: answers report usage by its rules
    refuse_images: int = 0  # an HTTP status: requests that carry an image are refused with it, as a
    #   provider that stopped taking imaged context did

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def last(self, path: str) -> Arrival:
        return [a for a in self.arrivals if a.path == path][-1]


def _openai_answer(model: str, text: str) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 2100, "completion_tokens": 11, "total_tokens": 2111,
                      "prompt_tokens_details": {"cached_tokens": 1920}}}


def _openai_events(model: str, text: str) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(body).encode() + b"\n\n"
    words = [text[i:i + 6] for i in range(0, len(text), 6)]
    usage = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model, "choices": [],
             "usage": _openai_answer(model, text)["usage"]}  # as with stream_options.include_usage
    return [chunk({"role": "assistant", "content": ""}), *(chunk({"content": w}) for w in words),
            chunk({}, "stop"), b"data: " + json.dumps(usage).encode() + b"\n\n", b"data: [DONE]\n\n"]


def _anthropic_answer(model: str, text: str, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {**(usage or {"input_tokens": 7, "cache_creation_input_tokens": 300,
                                   "cache_read_input_tokens": 2000}), "output_tokens": 11}}


def _anthropic_events(model: str, text: str, usage: dict[str, Any] | None = None) -> list[bytes]:
    def event(kind: str, data: dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()
    start = {**_anthropic_answer(model, "", usage), "content": []}
    words = [text[i:i + 6] for i in range(0, len(text), 6)]
    return [event("message_start", {"message": start}),
            event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
            *(event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": w}}) for w in words),
            event("content_block_stop", {"index": 0}),
            event("message_delta", {"delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                    "usage": {"output_tokens": 11}}),
            event("message_stop", {})]


def _prompt_tokens(raw: bytes) -> int:
    """A request's prompt in tokens as Anthropic counts them: about 4 bytes of text a token, and
    an image by its pixels (width x height / 750), its base64 not counted as text."""
    images = 0

    def strip(value: Any) -> Any:
        nonlocal images
        if isinstance(value, dict):
            source = value.get("source")
            if value.get("type") == "image" and isinstance(source, dict) and isinstance(source.get("data"), str):
                head = base64.b64decode(source["data"][:64] + "=" * (-len(source["data"][:64]) % 4))
                w, h = _image_dims(head)
                images += w * h // 750
                return {}
            return {k: strip(v) for k, v in value.items()}
        return [strip(v) for v in value] if isinstance(value, list) else value

    try:
        body = strip(json.loads(raw))
    except ValueError:
        return len(raw) // 4
    return len(json.dumps(body)) // 4 + images


def _image_dims(head: bytes) -> tuple[int, int]:
    """PNG's or WebP's width and height from an image's first bytes (a stand-in for the API's)."""
    if head[:8] == b"\x89PNG\r\n\x1a\n":
        return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
    if head[:4] == b"RIFF" and head[12:16] == b"VP8L":
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if head[:4] == b"RIFF" and head[12:16] == b"VP8X":
        return int.from_bytes(head[24:27], "little") + 1, int.from_bytes(head[27:30], "little") + 1
    return 1000, 1000


def _anthropic_usage(raw: bytes) -> dict[str, int]:
    """Usage as Anthropic reports it, sized by the request (`_prompt_tokens`): the prompt read
    from the cache but for its newest part, which is written to it."""
    total = max(10, _prompt_tokens(raw))
    return {"input_tokens": 3, "cache_creation_input_tokens": min(total - 3, 400),
            "cache_read_input_tokens": max(0, total - 403), "output_tokens": 1}


def _anthropic_tool_use(model: str, n: int, name: str, args: dict[str, Any], raw: bytes) -> list[bytes]:
    """A streamed answer that asks for one tool call, with the usage of the request it answers."""
    def event(kind: str, data: dict[str, Any]) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()
    start = {**_anthropic_answer(model, ""), "id": f"msg_{n}", "content": [], "stop_reason": None,
             "usage": _anthropic_usage(raw)}
    text = json.dumps(args)
    return [event("message_start", {"message": start}),
            event("content_block_start", {"index": 0, "content_block": {"type": "tool_use", "id": f"toolu_{n:04d}",
                                                                        "name": name, "input": {}}}),
            *(event("content_block_delta", {"index": 0, "delta": {"type": "input_json_delta",
                                                                  "partial_json": text[i:i + 40]}})
              for i in range(0, len(text), 40)),
            event("content_block_stop", {"index": 0}),
            event("message_delta", {"delta": {"stop_reason": "tool_use", "stop_sequence": None},
                                    "usage": {"output_tokens": 20}}),
            event("message_stop", {})]


def _responses_answer(model: str, text: str, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    message = {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
               "content": [{"type": "output_text", "text": text, "annotations": []}]}
    return {"id": "resp_1", "object": "response", "created_at": 1, "status": "completed", "model": model,
            "output": [message] if text else [], "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "usage": usage or {"input_tokens": 2100, "input_tokens_details": {"cached_tokens": 1920},
                               "output_tokens": 11, "output_tokens_details": {"reasoning_tokens": 0},
                               "total_tokens": 2111}}


def _responses_call(model: str, n: int, name: str, arguments: str, usage: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """An answer that asks for a function call, after an encrypted reasoning item."""
    reasoning = {"type": "reasoning", "id": f"rs_{n}", "summary": [], "encrypted_content": f"gAAAA-{n}-" + "e" * 80}
    space, _, name = name.rpartition("/")  # "NAMESPACE/NAME": a tool of a namespace (Codex's MCP servers)
    call = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": name, "arguments": arguments,
            "status": "completed", **({"namespace": space} if space else {})}
    return {**_responses_answer(model, "", usage), "output": [reasoning, call]}


def _sse(n: Any, kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': next(n), **data})}\n\n".encode()


def _responses_call_events(done: dict[str, Any]) -> list[bytes]:
    n = iter(range(10**6))
    start = {**done, "status": "in_progress", "output": [], "usage": None}
    return [_sse(n, "response.created", {"response": start}),
            *(e for i, item in enumerate(done["output"]) for e in (
                _sse(n, "response.output_item.added", {"output_index": i, "item": item}),
                _sse(n, "response.output_item.done", {"output_index": i, "item": item}))),
            _sse(n, "response.completed", {"response": done})]


def _responses_events(model: str, text: str, usage: dict[str, Any] | None = None) -> list[bytes]:
    """The Responses API's stream: created, the message's item and part, text deltas, and
    response.completed with the usage."""
    n = iter(range(10**6))

    def event(kind: str, data: dict[str, Any]) -> bytes:
        return _sse(n, kind, data)
    done = _responses_answer(model, text, usage)
    item, part = done["output"][0], done["output"][0]["content"][0]
    start = {**done, "status": "in_progress", "output": [], "usage": None}
    words = [text[i:i + 6] for i in range(0, len(text), 6)]
    at = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    return [event("response.created", {"response": start}),
            event("response.output_item.added", {"output_index": 0, "item": {**item, "content": [],
                                                                             "status": "in_progress"}}),
            event("response.content_part.added", {**at, "part": {**part, "text": ""}}),
            *(event("response.output_text.delta", {**at, "delta": w, "logprobs": []}) for w in words),
            event("response.output_text.done", {**at, "text": text, "logprobs": []}),
            event("response.content_part.done", {**at, "part": part}),
            event("response.output_item.done", {"output_index": 0, "item": item}),
            event("response.completed", {"response": done})]


def start_upstream() -> tuple[Upstream, ThreadingHTTPServer]:
    state = Upstream()
    fixed = json.dumps(_openai_answer("m", state.reply)).encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None,
                  kind: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("content-length", str(len(body)))
            for k, v in {**state.headers, **(headers or {})}.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            with state.lock:
                fail, state.fail = state.fail, None
            if fail is not None:
                self._send(fail[0], b'{"error": {"message": "moved"}}', fail[1])
            elif self.path in ("/v1/models",):
                self._send(200, json.dumps({"object": "list", "data": [{"id": "up-model", "object": "model",
                                                                        "created": 1, "owned_by": "test"}]}).encode())
            else:
                self._send(404, b'{"error": {"message": "no"}}')

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length", 0)))
            time.sleep(state.delay)
            if not state.keep:  # a load test's upstream: the cost of an answer, no more
                self._send(200, fixed)
                return
            with state.lock:
                state.arrivals.append(Arrival(self.path, {k.lower(): v for k, v in self.headers.items()}, raw))
                fail, state.fail = state.fail, None
                cut, state.break_stream = state.break_stream, False
            if state.refuse_images and (b'"image"' in raw or b'"image_url"' in raw or b'"input_image"' in raw):
                self._send(state.refuse_images, json.dumps({"type": "error", "error": {
                    "type": "invalid_request_error", "message": "Could not process image"}}).encode())
                return
            if fail is not None:
                status, headers = fail
                self._send(status, json.dumps({"error": {"message": "slow down", "type": "rate_limit_error"}}).encode(),
                           headers)
                return
            body = json.loads(raw)
            model = body.get("model", "m")
            path = self.path.split("?", 1)[0]
            tools = body.get("tools") if isinstance(body.get("tools"), list) else []
            offered = {t.get("name") for t in tools if isinstance(t, dict)}
            if path == "/v1/messages" and state.tool_uses and state.tool_uses[0][0] in offered:
                with state.lock:
                    name, args = state.tool_uses.pop(0)
                    number = len(state.arrivals)
                args = args(body) if callable(args) else args  # a call made from what the request says
                self._send(200, b"".join(_anthropic_tool_use(model, number, name, args, raw)),
                           kind="text/event-stream")
                return
            if self.path == "/v1/messages/count_tokens":
                self._send(200, json.dumps({"input_tokens": len(raw) // 4}).encode())
                return
            if self.path == "/v1/responses" and state.calls:
                with state.lock:
                    name, arguments = state.calls.pop(0)
                    number = len(state.arrivals)
                arguments = arguments(body) if callable(arguments) else arguments  # made from the request
                done = _responses_call(model, number, name, arguments,
                                       state.cache.usage(body, time.time()) if state.cache is not None else None)
                if body.get("stream"):
                    self._send(200, b"".join(_responses_call_events(done)), kind="text/event-stream")
                else:
                    self._send(200, json.dumps(done).encode())
                return
            answer, events = {"/v1/messages": (_anthropic_answer, _anthropic_events),
                              "/v1/responses": (_responses_answer, _responses_events)}.get(
                path, (_openai_answer, _openai_events))
            if path in ("/v1/messages", "/v1/responses") and state.cache is not None:
                usage = state.cache.usage(body, time.time())
                answer, events = partial(answer, usage=usage), partial(events, usage=usage)
            if not body.get("stream"):
                whole = state.whole_body or json.dumps(answer(model, state.reply)).encode()
                self._send(200, whole, {"x-request-id": "req-upstream-1"})
                return
            events = events(model, state.reply)
            if state.stream_body is not None:
                events = [state.stream_body[i : i + 2**16] for i in range(0, len(state.stream_body), 2**16)]
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for n, e in enumerate(events):
                if cut and n == 1:
                    self.wfile.write(b"5\r\nda")  # half a chunk, then the connection drops
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(f"{len(e):x}\r\n".encode() + e + b"\r\n")
                self.wfile.flush()
                if state.stream_body is None:
                    time.sleep(0.002)
            self.wfile.write(b"0\r\n\r\n")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.port = server.server_address[1]
    server.timeout = 0.2

    def loop() -> None:
        for _ in range(MAX_REQUESTS):
            if getattr(server, "stopping", False):
                break
            server.handle_request()
    threading.Thread(target=loop, daemon=True).start()
    return state, server


def raw_exchange(port: int, data: bytes, wait: float = 3.0) -> bytes:
    """`data` written on one connection to 127.0.0.1:`port`, and all that comes back before the
    server closes it (or `wait` seconds pass without a byte): for requests no client would frame."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
        except TimeoutError:
            pass
        return out


def stop_upstream(server: ThreadingHTTPServer) -> None:
    server.stopping = True  # type: ignore[attr-defined]
    server.server_close()


class Proxy:
    """`optictx serve` on uvicorn, on a free loopback port, in a thread."""

    def __init__(self, config: ServeConfig) -> None:
        self.app = create_app(config)
        self.server = uvicorn.Server(uvicorn_config(
            self.app, host="127.0.0.1", port=0, head_timeout=config.head_timeout, log_level="warning",
            limit_max_requests=MAX_REQUESTS, lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("optictx serve did not start")
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    @property
    def proxy(self) -> Any:
        return self.app.state.proxy

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(20)


LABEL = re.compile(r"\[page [a-z0-9]+: turns #(\d+)(?:-#(\d+))?\]")


def faithful(turns: list[list[dict[str, Any]]], sent: list[dict[str, Any]], *, image: str, first: int = 0,
             front: int = 2, dropped: bool = False) -> None:
    """What went upstream, checked against what the client sent (not against optictx's own
    fitting). `turns`: the client's items grouped by turn, numbered from `first` (a turn the
    request carries outside the list, such as Responses' instructions, comes before it); a page
    is an item with a part of type `image`. Every item that is not a page is one of the client's,
    byte for byte, in the client's order, and a turn sent as itself is sent whole; the pages'
    labels name spans of the client's turns; every turn is somewhere, none twice as itself.
    `dropped`: a hard budget may drop pages, the oldest first: the turns nowhere are then one
    run, older than every turn sent but the `front` ones (the system prompt and the task)."""
    flat = [(n, json.dumps(item, sort_keys=True)) for n, turn in enumerate(turns, first) for item in turn]
    seen: dict[int, int] = {}
    spans: set[int] = set()
    last = -1
    for m in sent:
        content = m.get("content")
        if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == image for p in content):
            for p in content:
                for a, b in LABEL.findall(p.get("text", "") if isinstance(p, dict) else ""):
                    spans.update(range(int(a), int(b or a) + 1))
            continue
        mine = json.dumps(m, sort_keys=True)
        at = next((i for i in range(last + 1, len(flat)) if flat[i][1] == mine), None)
        assert at is not None, f"not the client's, or out of order: {mine[:120]}"
        seen[flat[at][0]] = seen.get(flat[at][0], 0) + 1
        last = at
    for n, count in seen.items():
        assert count == len(turns[n - first]), f"turn #{n} went in part"
    missing = set(range(first, first + len(turns))) - set(seen) - spans
    if dropped and missing:
        assert missing == set(range(min(missing), max(missing) + 1)), "dropped pages are one run"
        assert all(i > max(missing) for i in (set(seen) | spans) - set(range(front))), "the oldest were dropped"
    else:
        assert not missing, f"turns the client sent are nowhere: {sorted(missing)[:10]}"


class Reference:
    """What one proxy sends upstream for one conversation's requests, in order: one Memory fed
    each request's new turns, one context per request, the first user message pinned as the
    proxy pins it. Since the append-only planner, the body depends on the conversation's history
    of calls, not only on its turns (optictx/serve/proxy.py, `fit`)."""

    def __init__(self, dialect: Any, *, budget: int, keep: int, vision: str | None = None,
                 key: Callable[[], str] | None = None) -> None:
        self.dialect, self.budget, self.vision, self.keep = dialect, budget, vision, keep
        self.key = key  # the conversation's handle key, asked for once its first request is in
        self.memory: Any = None  # made on the first request, its pages drawn for that request's vision

    def send(self, body: dict[str, Any]) -> tuple[Any, Any]:
        from dataclasses import replace

        from optictx import Memory
        from optictx.serve.proxy import fit, kept_turns, vision_for

        parsed = self.dialect.parse(body, json.dumps(body).encode())
        parsed = replace(parsed, turns=kept_turns(parsed))
        vision = self.vision or vision_for(parsed.model, self.dialect.provider, "auto")
        if self.memory is None:
            self.memory = Memory(keep_recent=self.keep, budget=self.budget, vision=vision,
                                 key=self.key() if self.key else None)  # as the proxy's
        for t in parsed.turns[len(self.memory):]:
            self.memory.add(t)
        fitted, ctx = fit(self.memory, self.dialect, parsed, self.budget, vision)
        return json.loads(fitted), ctx


def fresh(dialect: Any, body: dict[str, Any], *, budget: int, keep: int, vision: str | None = None,
          key: Callable[[], str] | None = None) -> tuple[Any, Any]:
    """What the proxy sends for a conversation's first request: (body, context)."""
    return Reference(dialect, budget=budget, keep=keep, vision=vision, key=key).send(body)


def newest_key(ledger: Any, api_key: str = "key-a") -> Callable[[], str]:
    """The handle key of the tenant's newest conversation, read from the ledger when asked: the
    proxy keys a conversation's page handles by its id (`handles.key_for`)."""
    from optictx import handles
    from optictx.serve.conversations import tenant_of

    return lambda: handles.key_for(ledger.conversations(tenant_of({"authorization": f"Bearer {api_key}"}))[0]["id"])


class ServeProcess:
    """`optictx serve` as its own process (what a deployment runs N of), up once it answers."""

    def __init__(self, upstream_url: str, store: str | None, *, budget: int, keep_recent: int, vision: str,
                 key: str = "key-a") -> None:
        import openai

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        args = [sys.executable, "-m", "optictx", "serve", "--upstream", upstream_url, "--host", "127.0.0.1",
                "--port", str(self.port), "--vision", vision, "--budget", str(budget), "--keep-recent",
                str(keep_recent), "--tenancy", "per-key", "--store", store or ":memory:"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0, timeout=120)
        deadline = time.monotonic() + 60
        while True:  # a GET the proxy relays to the upstream's model list
            try:
                self.client.models.list()
                return
            except openai.APIConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"optictx serve did not start: {self.proc.stderr.read()[-2000:]}") from None
                time.sleep(0.2)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> str:
        """Stopped as Ctrl-C stops it: what it logged."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return self.proc.communicate(timeout=30)[1] or ""


def to_anthropic_messages(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """OpenAI-style sample messages as an Anthropic request (the test's own conversion)."""
    system, out = "", []
    for m in messages:
        if m["role"] == "system":
            system += m["content"]
            continue
        if m["role"] == "tool":
            role, blocks = "user", [{"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}]
        else:
            role, blocks = m["role"], [{"type": "text", "text": m["content"]}] if m.get("content") else []
            blocks += [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                        "input": json.loads(c["function"]["arguments"] or "{}")} for c in m.get("tool_calls", [])]
        if out and out[-1]["role"] == role:
            out[-1]["content"] += blocks
        else:
            out.append({"role": role, "content": blocks})
    return system, out


class Tap:
    """A recorder between a client and the proxy, on 127.0.0.1: what the client sent, byte for
    byte (the oracle for what the proxy must keep as it came), forwarded as it came, the answer
    streamed back as it arrives."""

    def __init__(self, target: str) -> None:
        import httpx

        self.sent: list[Arrival] = []
        tap = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self, method: str) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                if method == "POST":
                    tap.sent.append(Arrival(self.path, {k.lower(): v for k, v in self.headers.items()}, raw))
                with httpx.Client(timeout=120) as http, http.stream(method, target + self.path, content=raw or None,
                                                                    headers=headers) as r:
                    self.send_response(r.status_code)
                    for k, v in r.headers.items():
                        if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                            self.send_header(k, v)
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    for chunk in r.iter_bytes():
                        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")

            def do_POST(self) -> None:
                self._forward("POST")

            def do_GET(self) -> None:
                self._forward("GET")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.timeout = 0.2
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

        def loop() -> None:
            for _ in range(MAX_REQUESTS):
                if getattr(self.server, "stopping", False):
                    break
                self.server.handle_request()
        threading.Thread(target=loop, daemon=True).start()

    def stop(self) -> None:
        stop_upstream(self.server)
