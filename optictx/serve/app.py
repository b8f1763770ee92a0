"""The ASGI app: routes, guards (loopback or the proxy key, body size), errors in each API's
own shape, and the upstream relay. Memory work runs in worker threads, off the event loop."""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import replace

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..errors import OptictxError
from .anthropic_api import ANTHROPIC
from .config import ServeConfig, is_loopback
from .dashboard import routes as dashboard_routes
from .dialect import ApiError, Dialect, Parsed
from .meter import Usage, usage_record
from .openai_api import OPENAI
from .proxy import Fitted, Proxy
from .relay import Upstream

log = logging.getLogger("optictx.serve")
ROUTES = "POST /v1/chat/completions, POST /v1/messages, POST /v1/messages/count_tokens, GET /v1/models, GET /optictx/"


def _error(dialect: Dialect, exc: ApiError) -> JSONResponse:
    return JSONResponse(dialect.error(exc), exc.status)


async def _body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(f"the request body is {declared} bytes; this proxy takes at most {limit} (--max-body-bytes)",
                       status=413, kind="request_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(f"the request body is over {limit} bytes (--max-body-bytes)", status=413,
                           kind="request_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


def allowed(request: Request, config: ServeConfig) -> bool:
    """With a proxy key, the request presents it; without one, it comes from loopback."""
    if config.proxy_key:
        return hmac.compare_digest(request.headers.get("x-optictx-key", "").encode(), config.proxy_key.encode())
    return request.client is not None and is_loopback(request.client.host)


_LOCKED = "this proxy takes requests with its key only (X-Optictx-Key)"


class Server:
    """The routes, one method each, over one Proxy and its upstreams."""

    def __init__(self, config: ServeConfig) -> None:
        self.config, self.proxy = config, Proxy(config)
        self.upstreams = {name: Upstream(url, config.upstream_timeout) for name, url in
                          (("openai", config.upstream), ("anthropic", config.anthropic_upstream)) if url}

    def upstream(self, dialect: Dialect) -> Upstream:
        if dialect.name not in self.upstreams:
            flag = "--upstream" if dialect.name == "openai" else "--anthropic-upstream"
            raise ApiError(f"this proxy has no {dialect.name} upstream: start it with {flag} URL", status=404,
                           kind="not_found_error")
        return self.upstreams[dialect.name]

    async def prepare(self, request: Request, dialect: Dialect, keep: bool) -> tuple[Parsed, Fitted]:
        """The request checked, parsed and fitted (ApiError, in the API's shape, otherwise)."""
        if not allowed(request, self.config):
            raise ApiError(_LOCKED, status=401, kind="authentication_error")
        raw = await _body(request, self.config.max_body_bytes)
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise ApiError(f"the request body is not JSON ({str(exc)[:120]})") from exc
        parsed = dialect.parse(body, raw)
        try:
            return parsed, await run_in_threadpool(self.proxy.fit, dialect, parsed, request.headers, keep=keep)
        except ApiError:
            raise
        except OptictxError as exc:  # a turn over the limits, a damaged store: said, never a crash
            bad = isinstance(exc, ValueError)
            raise ApiError(f"optictx: {exc}", status=400 if bad else 500,
                           kind="invalid_request_error" if bad else "api_error") from exc

    async def complete(self, request: Request, dialect: Dialect, path: str) -> Response:
        try:
            parsed, fitted = await self.prepare(request, dialect, keep=True)
            sent = fitted.sent
            extra = {"x-optictx-conversation": sent.conversation, "x-optictx-vision": sent.vision,
                     "x-optictx-tokens": f"{sent.sent}/{sent.original}"}
            if fitted.charge is not None:  # modeled, base-input tokens (and dollars): optictx / as it came
                extra["x-optictx-cost"] = fitted.charge.header()
            if fitted.context is not None and fitted.context.event:
                extra["x-optictx-event"] = fitted.context.event
            if fitted.fallback:
                extra["x-optictx-fallback"] = fitted.fallback

            async def done(usage: Usage | None, status: int) -> None:
                try:  # bookkeeping: the answer reaches the client whatever becomes of it
                    billed = usage_record(usage, sent.vision, sent.model)
                    await run_in_threadpool(self.proxy.ledger.record, replace(sent, status=status, **billed))
                except Exception:
                    log.exception("conversation %s: the request's record was not stored", sent.conversation)

            upstream = self.upstream(dialect)
            return await upstream.post(path, fitted.body, request.headers, parsed.stream, dialect, extra, done)
        except ApiError as exc:
            return _error(dialect, exc)

    async def chat(self, request: Request) -> Response:
        return await self.complete(request, OPENAI, "/chat/completions")

    async def messages(self, request: Request) -> Response:
        return await self.complete(request, ANTHROPIC, "/v1/messages")

    async def count_tokens(self, request: Request) -> Response:
        """Anthropic's count of the fitted request (nothing is stored: a throwaway memory)."""
        try:
            _, fitted = await self.prepare(request, ANTHROPIC, keep=False)
            return await self.upstream(ANTHROPIC).post("/v1/messages/count_tokens", fitted.body, request.headers,
                                                       False, ANTHROPIC, {"x-optictx-vision": fitted.sent.vision})
        except ApiError as exc:
            return _error(ANTHROPIC, exc)

    async def models(self, request: Request) -> Response:
        """Passed through: to the Anthropic upstream for an Anthropic client (or the only one)."""
        ups = self.upstreams
        anthropic = "anthropic" in ups and ("anthropic-version" in request.headers or "openai" not in ups)
        dialect = ANTHROPIC if anthropic else OPENAI
        try:
            if not allowed(request, self.config):
                raise ApiError(_LOCKED, status=401, kind="authentication_error")
            return await self.upstream(dialect).get("/v1/models" if anthropic else "/models", request.headers)
        except ApiError as exc:
            return _error(dialect, exc)

    async def not_found(self, request: Request, exc: Exception) -> Response:
        message = f"optictx serve has no route {request.method} {request.url.path}; it serves {ROUTES}"
        return JSONResponse({"error": {"message": message, "type": "not_found_error", "param": None, "code": None}},
                            404)

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            for upstream in self.upstreams.values():
                await upstream.close()
            await run_in_threadpool(self.proxy.close)


def create_app(config: ServeConfig) -> Starlette:
    server = Server(config)
    routes = [Route("/v1/chat/completions", server.chat, methods=["POST"]),
              Route("/v1/messages", server.messages, methods=["POST"]),
              Route("/v1/messages/count_tokens", server.count_tokens, methods=["POST"]),
              Route("/v1/models", server.models, methods=["GET"]),
              *dashboard_routes(server.proxy, lambda request: allowed(request, config))]
    app = Starlette(routes=routes, lifespan=server.lifespan,
                    exception_handlers={404: server.not_found, 405: server.not_found})
    app.state.proxy = server.proxy
    return app


def run(config: ServeConfig) -> None:
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(config), host=config.host, port=config.port, log_level="info", access_log=False)
