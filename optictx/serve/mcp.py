"""An MCP server on `optictx serve` itself: the tools `search` and `recall` (`tools.SPECS`) over
Streamable HTTP at `/mcp`, with the official `mcp` SDK, stateless (any replica answers any call)
and in plain JSON. A request is admitted as the proxy's own are (`Server.admit`: loopback, or the
proxy key) and sees its tenant's conversations only (`Proxy.tenant`: every request is the one
person's on a personal proxy; with a proxy key, the credential it sends, as the API calls do).

    claude mcp add --transport http optictx http://127.0.0.1:8765/mcp
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from ..errors import need
from ..tools import ABOUT, SPECS, answer
from .dialect import ApiError
from .guards import InFlight, body
from .proxy import Proxy
from .recall import TenantRecall

PATH = "/mcp"


class McpServer:
    """The `/mcp` route and the lifespan its sessions run in."""

    def __init__(self, proxy: Proxy, admit: Callable[[Request], None], inflight: InFlight) -> None:
        need("mcp", "serve")
        from mcp import types
        from mcp.server.lowlevel.server import Server
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
        from mcp.server.transport_security import TransportSecuritySettings

        self.proxy, self.admit, self._types = proxy, admit, types
        self.inflight = inflight  # the API's bound: MCP bodies count among its bytes
        server: Any = Server("optictx", instructions=ABOUT, on_list_tools=self._list, on_call_tool=self._call)
        # Hosts and origins are the proxy's own guard's to check (`guards.local_only`), as on its API.
        self.manager = StreamableHTTPSessionManager(
            app=server, stateless=True, json_response=True,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False))

    def route(self) -> Route:
        return Route(PATH, self, methods=["GET", "POST", "DELETE"])  # an ASGI app: the SDK reads the request

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self.manager.run():
            yield

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        try:
            self.admit(request)
            if request.method == "GET":  # stateless: there is no stream the server would send on
                raise ApiError("this MCP server is stateless: it opens no event stream; POST a JSON-RPC message",
                               status=405)
            raw = await body(request, self.proxy.config.max_body_bytes, self.inflight) \
                if request.method == "POST" else b""
        except ApiError as exc:
            headers = {"allow": "POST, DELETE"} if exc.status == 405 else {}
            await JSONResponse({"error": {"message": str(exc), "type": exc.kind}}, exc.status, headers)(
                scope, receive, send)
            return
        try:  # its bytes count among the proxy's in flight until it is answered
            wrong = _unanswerable(raw)
            if wrong is not None:
                await JSONResponse({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": wrong}},
                                   400)(scope, receive, send)
                return
            await self.manager.handle_request(scope, _replay(raw, receive), send)
        finally:
            self.inflight.give(len(raw))

    async def _list(self, ctx: Any, params: Any) -> Any:
        t = self._types
        return t.ListToolsResult(tools=[t.Tool(name=s.name, description=s.description, input_schema=s.schema())
                                        for s in SPECS])

    async def _call(self, ctx: Any, params: Any) -> Any:
        headers = getattr(ctx.request, "headers", {}) or {}
        target = TenantRecall(self.proxy.conversations, self.proxy.tenant(headers))
        text, error = await anyio.to_thread.run_sync(answer, target, params.name, params.arguments or {})
        return self._types.CallToolResult(content=[self._types.TextContent(type="text", text=text)], is_error=error)


def _unanswerable(raw: bytes) -> str | None:
    """Why a JSON-RPC message could get no answer (an `id` that is neither a string nor a whole
    number: an object, a list, a bool, 1.5 or null, which the SDK took and dropped silently);
    None where the SDK may judge it."""
    try:
        message = json.loads(raw) if raw else None
    except (ValueError, RecursionError):
        return None  # the SDK answers a parse error itself
    for m in message if isinstance(message, list) else [message]:
        if isinstance(m, dict) and "id" in m and not (isinstance(m["id"], str) or (
                isinstance(m["id"], int) and not isinstance(m["id"], bool))):
            return "Invalid Request: a JSON-RPC id is a string or a whole number"
    return None


def _replay(raw: bytes, then: Receive) -> Receive:
    """A body already read, handed on as the ASGI message it came in; after it, what the
    connection says (its client leaving)."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return await then()
        sent = True
        return {"type": "http.request", "body": raw, "more_body": False}

    return receive
