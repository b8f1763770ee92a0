"""The ASGI app: routes, guards (loopback or the proxy key, body size), errors in each API's
own shape, and the upstream relay. Memory work runs in worker threads, off the event loop."""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..errors import OptictxError
from .anthropic_api import ANTHROPIC
from .config import ServeConfig, is_loopback
from .dashboard import routes as dashboard_routes
from .dialect import ApiError, Dialect
from .openai_api import OPENAI
from .proxy import Proxy
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


def create_app(config: ServeConfig) -> Starlette:
    proxy = Proxy(config)
    upstreams = {name: Upstream(url, config.upstream_timeout)
                 for name, url in (("openai", config.upstream), ("anthropic", config.anthropic_upstream)) if url}

    def upstream_for(dialect: Dialect) -> Upstream:
        if dialect.name not in upstreams:
            flag = "--upstream" if dialect.name == "openai" else "--anthropic-upstream"
            raise ApiError(f"this proxy has no {dialect.name} upstream: start it with {flag} URL", status=404,
                           kind="not_found_error")
        return upstreams[dialect.name]

    async def prepare(request: Request, dialect: Dialect, keep: bool) -> tuple[Any, Any]:
        if not allowed(request, config):
            raise ApiError("this proxy takes requests with its key only (X-Optictx-Key)", status=401,
                           kind="authentication_error")
        raw = await _body(request, config.max_body_bytes)
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise ApiError(f"the request body is not JSON ({str(exc)[:120]})") from exc
        parsed = dialect.parse(body, raw)
        try:
            fitted = await run_in_threadpool(proxy.fit, dialect, parsed, request.headers, keep=keep)
        except ApiError:
            raise
        except OptictxError as exc:  # a turn over the limits, a damaged store: said, never a crash
            raise ApiError(f"optictx: {exc}", status=400 if isinstance(exc, ValueError) else 500,
                           kind="invalid_request_error" if isinstance(exc, ValueError) else "api_error") from exc
        return parsed, fitted

    async def complete(request: Request, dialect: Dialect, path: str) -> Response:
        try:
            parsed, fitted = await prepare(request, dialect, keep=True)
            sent = fitted.sent
            extra = {"x-optictx-conversation": sent.conversation, "x-optictx-vision": sent.vision,
                     "x-optictx-tokens": f"{sent.sent}/{sent.original}"}
            if fitted.fallback:
                extra["x-optictx-fallback"] = fitted.fallback
            upstream = upstream_for(dialect)
            response = await upstream.post(path, fitted.body, request.headers, parsed.stream, dialect, extra)
        except ApiError as exc:
            return _error(dialect, exc)
        await run_in_threadpool(proxy.ledger.record, replace(sent, status=response.status_code))
        return response

    async def chat(request: Request) -> Response:
        return await complete(request, OPENAI, "/chat/completions")

    async def messages(request: Request) -> Response:
        return await complete(request, ANTHROPIC, "/v1/messages")

    async def count_tokens(request: Request) -> Response:
        try:
            _, fitted = await prepare(request, ANTHROPIC, keep=False)
            return await upstream_for(ANTHROPIC).post("/v1/messages/count_tokens", fitted.body, request.headers,
                                                      False, ANTHROPIC, {"x-optictx-vision": fitted.sent.vision})
        except ApiError as exc:
            return _error(ANTHROPIC, exc)

    async def models(request: Request) -> Response:
        anthropic = "anthropic" in upstreams and ("anthropic-version" in request.headers or "openai" not in upstreams)
        dialect = ANTHROPIC if anthropic else OPENAI
        if not allowed(request, config):
            return _error(dialect, ApiError("this proxy takes requests with its key only (X-Optictx-Key)", status=401,
                                            kind="authentication_error"))
        try:
            return await upstream_for(dialect).get("/v1/models" if anthropic else "/models", request.headers)
        except ApiError as exc:
            return _error(dialect, exc)

    async def not_found(request: Request, exc: Exception) -> Response:
        message = f"optictx serve has no route {request.method} {request.url.path}; it serves {ROUTES}"
        return JSONResponse({"error": {"message": message, "type": "not_found_error", "param": None, "code": None}},
                            404)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            for upstream in upstreams.values():
                await upstream.close()
            await run_in_threadpool(proxy.close)

    routes = [Route("/v1/chat/completions", chat, methods=["POST"]),
              Route("/v1/messages", messages, methods=["POST"]),
              Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
              Route("/v1/models", models, methods=["GET"]),
              *dashboard_routes(proxy, lambda request: allowed(request, config))]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: not_found, 405: not_found})
    app.state.proxy = proxy
    return app


def run(config: ServeConfig) -> None:
    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app(config), host=config.host, port=config.port, log_level="info", access_log=False)
