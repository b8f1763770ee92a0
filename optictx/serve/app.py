"""The ASGI app: routes, guards (`guards.py`), errors in each API's own shape (never a bare 500),
and the upstream relay. Memory work runs in worker threads, off the event loop, a few per
tenant at most."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..misread import Misread
from .answer import misread_header, misread_json
from .answers import answered, incident
from .anthropic_api import ANTHROPIC
from .config import ServeConfig
from .conversations import tenant_of
from .dashboard import routes as dashboard_routes
from .dialect import ApiError, Dialect, Parsed
from .guards import LOCKED, InFlight, allowed, body, framed, headers_bounded, json_typed, local_only, read
from .mcp import McpServer
from .meter import Usage, allowance, usage_record
from .openai_api import OPENAI
from .proxy import Fitted, Proxy
from .refusals import Refusal
from .relay import Upstream
from .responses_api import RESPONSES

log = logging.getLogger("optictx.serve")
ROUTES = (
    "POST /v1/chat/completions, POST /v1/responses, POST /v1/messages, POST /v1/messages/count_tokens, "
    "GET /v1/models, POST /mcp (the tools search and recall), GET /optictx/")


class Tenants:
    """Worker threads by credential: one tenant holds at most `threads` of the pool at once, and
    waits at most `wait` seconds for one (429 beyond), on the event loop, holding no thread. So
    requests stuck on one conversation (a locked store, a stopped replica's row lock) never
    leave another tenant without a worker."""

    def __init__(self, threads: int, wait: float) -> None:
        self.threads, self.wait = threads, wait
        self._limiters: dict[str, anyio.CapacityLimiter] = {}

    async def run(self, tenant: str, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        limiter = self._limiters.setdefault(tenant, anyio.CapacityLimiter(self.threads))
        try:
            with anyio.fail_after(self.wait):
                await limiter.acquire()
        except TimeoutError:
            raise ApiError(f"this API key has {self.threads} requests in progress already (waited {self.wait:g} s); "
                           "retry shortly", status=429, kind="rate_limit_error", retry_after=1) from None
        try:
            return await run_in_threadpool(func, *args, **kwargs)
        finally:
            limiter.release()
            if limiter.borrowed_tokens == 0 and limiter.statistics().tasks_waiting == 0:
                self._limiters.pop(tenant, None)


def _with_query(path: str, request: Request) -> str:
    """The upstream path with the client's query string, as it came (Claude Code's SDK asks
    `/v1/messages?beta=true`)."""
    query = request.url.query
    return f"{path}?{query}" if query else path


async def _gone(request: Request) -> None:
    """Returns once the client has disconnected (its body was read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class Server:
    """The routes, one method each, over one Proxy and its upstreams."""

    def __init__(self, config: ServeConfig) -> None:
        self.config, self.proxy = config, Proxy(config)
        self.upstreams = {name: Upstream(url, config.upstream_timeout, config.max_answer_bytes) for name, url in
                          (("openai", config.upstream), ("anthropic", config.anthropic_upstream)) if url}
        self.inflight = InFlight(config.max_inflight_bytes)
        self.tenants = Tenants(config.tenant_threads, config.lock_wait)
        self.mcp = McpServer(self.proxy, self.admit, self.inflight)

    def upstream(self, dialect: Dialect) -> Upstream:
        if dialect.provider not in self.upstreams:
            flag = "--upstream" if dialect.provider == "openai" else "--anthropic-upstream"
            raise ApiError(f"this proxy has no {dialect.provider} upstream: start it with {flag} URL", status=404,
                           kind="not_found_error")
        return self.upstreams[dialect.provider]

    def admit(self, request: Request, *, api: bool = False) -> None:
        """Who may ask, from where, and how the request is framed (ApiError otherwise)."""
        framed(request)
        headers_bounded(request)
        if not allowed(request, self.config):
            raise ApiError(LOCKED, status=401, kind="authentication_error")
        local_only(request, self.config)
        if api:
            json_typed(request)

    @contextlib.asynccontextmanager
    async def _read(self, request: Request) -> AsyncIterator[bytes]:
        """An API request admitted and its body read, its bytes counted in flight until done."""
        self.admit(request, api=True)
        raw = await body(request, self.config.max_body_bytes, self.inflight)
        try:
            yield raw
        finally:
            self.inflight.give(len(raw))

    async def prepare(self, request: Request, dialect: Dialect, raw: bytes, keep: bool) -> tuple[Parsed, Fitted]:
        """The request parsed and fitted (ApiError, or an error `answers.refused` words); both off
        the event loop: parsing a large body there would hold up every stream in flight."""
        parsed = await run_in_threadpool(read, dialect, raw)
        return parsed, await self.tenants.run(tenant_of(request.headers), self.proxy.fit, dialect, parsed,
                                              request.headers, keep=keep)

    async def complete(self, request: Request, dialect: Dialect, path: str) -> Response:
        async with self._read(request) as raw:
            parsed, fitted = await self.prepare(request, dialect, raw, keep=True)
            sent = fitted.sent
            extra = {"x-optictx-conversation": sent.conversation, "x-optictx-vision": sent.vision,
                     "x-optictx-tokens": f"{sent.sent}/{sent.original}"}
            if fitted.charge is not None:  # modeled, base-input tokens (and dollars): optictx / as it came
                extra["x-optictx-cost"] = fitted.charge.header()
            if fitted.context is not None and fitted.context.event:
                extra["x-optictx-event"] = fitted.context.event
            if fitted.fallback:
                extra["x-optictx-fallback"] = fitted.fallback

            ctx = fitted.context  # the misreading check reads the answer where pages went as images
            reads = ctx is not None and any(p.tier.is_image for p in ctx.pages)
            refusal = Refusal(parsed.raw) if reads else None  # refused pages: sent as the client sent it

            async def done(usage: Usage | None, status: int, answer: str = "") -> dict[str, str]:
                misread: list[Misread] = []
                why = refusal.why if refusal is not None else None
                try:  # bookkeeping: the answer reaches the client, unchanged, whatever becomes of it
                    if why is not None:
                        self.proxy.refusals.note(sent.model)
                        if fitted.meter is not None:
                            fitted.meter.resent()
                    elif reads and answer:
                        misread = await run_in_threadpool(ctx.check, answer)  # type: ignore[union-attr]
                    billed = usage_record(usage, sent.vision, sent.model,
                                          allowance(parsed.raw if why is not None else fitted.body))
                    went = {} if why is None else {"cost": sent.passthrough, "cost_usd": sent.passthrough_usd}
                    await run_in_threadpool(self.proxy.ledger.record, replace(
                        sent, status=status, misread=misread_json(misread), refused=why, **went, **billed))
                except Exception:
                    incident(f"conversation {sent.conversation}: the request's record was not stored",
                             "answer relayed, record lost")
                return {"x-optictx-misread": misread_header(misread)} if misread else {}

            upstream, target = self.upstream(dialect), _with_query(path, request)
            return await self._relayed(request, lambda: upstream.post(target, fitted.body, request.headers,
                                                                      parsed.stream, dialect, extra, done,
                                                                      reads=reads, refusal=refusal), done)

    async def _relayed(self, request: Request, call: Callable[[], Awaitable[Response]],
                       done: Callable[..., Awaitable[None]]) -> Response:
        """The upstream call's response, or nothing if the client has left: before it, nothing
        goes upstream; while it waits, the call is cancelled (a stream's relay stops by itself
        when its client leaves)."""
        response: Response | None = None
        failed: Exception | None = None
        if not await request.is_disconnected():
            async with anyio.create_task_group() as group:
                async def watch() -> None:
                    await _gone(request)
                    group.cancel_scope.cancel()

                group.start_soon(watch)
                try:
                    response = await call()
                except Exception as exc:  # raised here, not as a task group's ExceptionGroup
                    failed = exc
                group.cancel_scope.cancel()
        if failed is not None:
            raise failed
        if response is None:
            log.info("the client left before the upstream answered: nothing sent, or the call cancelled")
            with anyio.CancelScope(shield=True):
                await done(None, 499, "")
            return Response(status_code=499)
        return response

    async def chat(self, request: Request) -> Response:
        return await answered(OPENAI, lambda: self.complete(request, OPENAI, "/chat/completions"))

    async def responses(self, request: Request) -> Response:
        return await answered(RESPONSES, lambda: self.complete(request, RESPONSES, "/responses"))

    async def messages(self, request: Request) -> Response:
        return await answered(ANTHROPIC, lambda: self.complete(request, ANTHROPIC, "/v1/messages"))

    async def count_tokens(self, request: Request) -> Response:
        """Anthropic's count of the fitted request (nothing is stored: a throwaway memory)."""
        async def work() -> Response:
            async with self._read(request) as raw:
                _, fitted = await self.prepare(request, ANTHROPIC, raw, keep=False)
                vision = {"x-optictx-vision": fitted.sent.vision}
                return await self.upstream(ANTHROPIC).post(_with_query("/v1/messages/count_tokens", request),
                                                           fitted.body, request.headers, False, ANTHROPIC, vision)

        return await answered(ANTHROPIC, work)

    async def models(self, request: Request) -> Response:
        """Passed through: to the Anthropic upstream for an Anthropic client (or the only one)."""
        ups = self.upstreams
        anthropic = "anthropic" in ups and ("anthropic-version" in request.headers or "openai" not in ups)
        dialect = ANTHROPIC if anthropic else OPENAI

        async def work() -> Response:
            self.admit(request)
            return await self.upstream(dialect).get("/v1/models" if anthropic else "/models", request.headers)

        return await answered(dialect, work)

    async def not_found(self, request: Request, exc: Exception) -> Response:
        message = f"optictx serve has no route {request.method} {request.url.path[:200]}; it serves {ROUTES}"
        return JSONResponse({"error": {"message": message, "type": "not_found_error", "param": None, "code": None}},
                            404)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        try:
            async with self.mcp.running():
                yield
        finally:
            for upstream in self.upstreams.values():
                await upstream.close()
            await run_in_threadpool(self.proxy.close)


def create_app(config: ServeConfig) -> Starlette:
    server = Server(config)
    routes = [Route("/v1/chat/completions", server.chat, methods=["POST"]),
              Route("/v1/responses", server.responses, methods=["POST"]),
              Route("/v1/messages", server.messages, methods=["POST"]),
              Route("/v1/messages/count_tokens", server.count_tokens, methods=["POST"]),
              Route("/v1/models", server.models, methods=["GET"]),
              server.mcp.route(),
              *dashboard_routes(server.proxy, server.admit)]
    app = Starlette(routes=routes, lifespan=server.lifespan,
                    exception_handlers={404: server.not_found, 405: server.not_found})
    app.state.proxy = server.proxy
    return app


def run(config: ServeConfig) -> None:
    import uvicorn

    from .wire import uvicorn_config

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    ups = ", ".join(f"{name} {url}" for name, url in (("OpenAI", config.upstream),
                                                     ("Anthropic", config.anthropic_upstream)) if url)
    print(f"optictx serve: upstreams {ups}; memories kept in {config.kept}", file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn_config(create_app(config), host=config.host, port=config.port,
                                           head_timeout=config.head_timeout, log_level="info", access_log=False))
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: uvicorn has shut down cleanly; no traceback
        server.run()
