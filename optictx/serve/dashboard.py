"""`GET /optictx/`: what the proxy sent, per conversation of the caller. The page is static; its
script asks the JSON routes with the caller's API key, and each route answers for that key's
conversations only (another key's are "not found")."""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from ..report import contact_sheet
from .answers import INCIDENTS, answered
from .conversations import tenant_of
from .openai_api import OPENAI

if TYPE_CHECKING:
    from .proxy import Proxy

_UNKNOWN = {"error": {"message": "no such conversation for this API key", "type": "not_found_error"}}
_ID = re.compile(r"[0-9a-f]{16}")  # conversations.Conversations._new's ids


def routes(proxy: Proxy, admit: Callable[[Request], None]) -> list[Route]:
    """`admit` raises ApiError for a request the dashboard must not answer (guards.py)."""
    page = resources.files(__package__).joinpath("dashboard.html").read_text(encoding="utf-8")

    def guard(handler: Callable) -> Callable:
        async def guarded(request: Request) -> Response:
            async def work() -> Response:
                admit(request)
                return await handler(request)
            return await answered(OPENAI, work)  # errors as {"error": {...}}, the shape the page reads
        return guarded

    async def index(request: Request) -> Response:
        return HTMLResponse(page, headers={"cache-control": "no-store",
                                           "content-security-policy": "default-src 'self'; img-src 'self' blob:; "
                                           "style-src 'unsafe-inline'; script-src 'unsafe-inline'"})

    async def conversations(request: Request) -> Response:
        rows = await run_in_threadpool(proxy.ledger.conversations, tenant_of(request.headers))
        return JSONResponse({"conversations": rows})

    async def conversation(request: Request) -> Response:
        tenant, cid = tenant_of(request.headers), request.path_params["cid"]
        if not _ID.fullmatch(cid) or await run_in_threadpool(proxy.ledger.owner, cid) != tenant:
            return JSONResponse(_UNKNOWN, 404)
        rows = await run_in_threadpool(proxy.ledger.requests, tenant, cid)
        return JSONResponse({"id": cid, "requests": rows})

    async def status(request: Request) -> Response:
        """What went wrong since start, counted (details in the log): the same for every tenant."""
        return JSONResponse({"incidents": dict(INCIDENTS)})

    async def contact(request: Request) -> Response:
        conv = proxy.conversations.find(tenant_of(request.headers), request.path_params["cid"])
        if conv is None or conv.last is None:
            return JSONResponse(_UNKNOWN, 404)

        def draw() -> bytes:
            buf = io.BytesIO()
            contact_sheet(conv.last, thumb=120).save(buf, format="PNG")  # type: ignore[arg-type]
            return buf.getvalue()

        return Response(await run_in_threadpool(draw), media_type="image/png", headers={"cache-control": "no-store"})

    return [Route("/optictx/", guard(index)),
            Route("/optictx/api/conversations", guard(conversations)),
            Route("/optictx/api/status", guard(status)),
            Route("/optictx/api/conversations/{cid}", guard(conversation)),
            Route("/optictx/api/conversations/{cid}/contact.png", guard(contact))]
