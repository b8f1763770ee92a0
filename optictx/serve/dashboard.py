"""`GET /optictx/`: what the proxy sent, per conversation of the caller. The page is static; its
script asks the JSON routes, and each answers for the caller's tenant only (another's are "not
found"): on a personal proxy that is everything it served, with no key; per key, the
conversations of the API key the page is given (`ServeConfig.tenancy`)."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from ..images import MEDIA_TYPE
from .answers import FALLBACKS, INCIDENTS, answered
from .openai_api import OPENAI

if TYPE_CHECKING:
    from ..context import Context
    from .proxy import Proxy

_UNKNOWN = {"error": {"message": "no such conversation for this API key", "type": "not_found_error"}}
_ID = re.compile(r"[0-9a-f]{16}")  # conversations.Conversations._new's ids


def routes(proxy: Proxy, admit: Callable[[Request], None]) -> list[Route]:
    """`admit` raises ApiError for a request the dashboard must not answer (guards.py)."""
    html = resources.files(__package__).joinpath("dashboard.html").read_text(encoding="utf-8")

    def guard(handler: Callable) -> Callable:
        async def guarded(request: Request) -> Response:
            async def work() -> Response:
                admit(request)
                return await handler(request)
            return await answered(OPENAI, work)  # errors as {"error": {...}}, the shape the page reads
        return guarded

    async def index(request: Request) -> Response:
        # Never framed by another page (clickjacking): frame-ancestors, and X-Frame-Options for
        # browsers that predate it.
        return HTMLResponse(html, headers={"cache-control": "no-store", "x-frame-options": "DENY",
                                           "content-security-policy": "default-src 'self'; img-src 'self' blob:; "
                                           "style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
                                           "frame-ancestors 'none'"})

    async def conversations(request: Request) -> Response:
        rows = await run_in_threadpool(proxy.ledger.conversations, proxy.tenant(request.headers))
        return JSONResponse({"conversations": rows})

    async def conversation(request: Request) -> Response:
        tenant, cid = proxy.tenant(request.headers), request.path_params["cid"]
        if not _ID.fullmatch(cid) or await run_in_threadpool(proxy.ledger.owner, cid) != tenant:
            return JSONResponse(_UNKNOWN, 404)
        rows = await run_in_threadpool(proxy.ledger.requests, tenant, cid)
        return JSONResponse({"id": cid, "requests": rows})

    async def status(request: Request) -> Response:
        """What went wrong since start, counted (details in the log), the requests sent as they
        came (or with turns kept as they came) by why, and whose conversations a request sees:
        the same for every tenant."""
        kept = proxy.config.kept if proxy.config.personal else None  # said to the one person, never to a key
        return JSONResponse({"incidents": dict(INCIDENTS), "fallbacks": dict(FALLBACKS),
                             "tenancy": "personal" if proxy.config.personal else "per-key", "store": kept})

    async def latest(request: Request) -> Context | None:
        """The latest context of the caller's conversation (after a restart, drawn again: it may
        reopen the memory, so off the event loop)."""
        cid = request.path_params["cid"]
        if not _ID.fullmatch(cid):
            return None
        return await run_in_threadpool(proxy.conversations.latest, proxy.tenant(request.headers), cid)

    async def pages(request: Request) -> Response:
        """The latest context's pages: tier, turns, tokens and the text each replaced."""
        ctx = await latest(request)
        if ctx is None:
            return JSONResponse(_UNKNOWN, 404)
        return JSONResponse({"gone": len(ctx.gone), "vision": ctx.vision.name, "pages": [
            {"n": n, "tier": seg.tier.value, "handle": seg.page.handle,
             "turns": [seg.turn_ids[0], seg.turn_ids[-1]] if seg.turn_ids else [],
             "tokens": seg.tokens, "image": seg.tier.is_image, "text": seg.text} for n, seg in enumerate(ctx.pages)]})

    async def page_image(request: Request) -> Response:
        """One page of the latest context, as the model received it (full size, at its tier)."""
        ctx, n = await latest(request), request.path_params["n"]
        if ctx is None or not 0 <= n < len(ctx.pages) or not ctx.pages[n].tier.is_image:
            return JSONResponse(_UNKNOWN, 404)
        image = await run_in_threadpool(lambda: base64.b64decode(ctx.pages[n].image_base64()))
        return Response(image, media_type=MEDIA_TYPE, headers={"cache-control": "no-store"})

    return [Route("/optictx/", guard(index)),
            Route("/optictx/api/conversations", guard(conversations)),
            Route("/optictx/api/status", guard(status)),
            Route("/optictx/api/conversations/{cid}", guard(conversation)),
            Route("/optictx/api/conversations/{cid}/pages", guard(pages)),
            Route("/optictx/api/conversations/{cid}/pages/{n:int}.webp", guard(page_image))]
