"""What a client is told when the proxy answers for itself: an error in its API's own shape,
naming the problem, never a path, a database address or a secret (those go to the log, under an
incident id the client is given), and never a bare 500."""

from __future__ import annotations

import logging
import secrets
import sqlite3
from collections import Counter
from collections.abc import Awaitable, Callable

from starlette.responses import JSONResponse, Response

from ..errors import OptictxError, StoreError
from .dialect import ApiError, Dialect

log = logging.getLogger("optictx.serve")


def error(dialect: Dialect, exc: ApiError) -> JSONResponse:
    return JSONResponse(dialect.error(exc), exc.status, headers=exc.headers)


# Failures since start, by what failed (`GET /optictx/api/status`): an operator sees them
# counted, not only logged.
INCIDENTS: Counter[str] = Counter()
# Requests sent as they came, or with turns kept as they came, by why (`X-Optictx-Fallback`, its
# part before the colon): "unknown-shape", "kept-as-sent", "upstream-state", "budget", "too-large".
FALLBACKS: Counter[str] = Counter()


def incident(what: str, kind: str = "error") -> str:
    """A short id for a failure whose details go to the log only (they may name files, hosts),
    counted under `kind`."""
    INCIDENTS[kind] += 1
    code = secrets.token_hex(4)
    log.exception("%s (incident %s)", what, code)
    return code


def store_trouble(exc: BaseException) -> bool:
    """A store or database that cannot be used now (down, locked, damaged), as opposed to a bug."""
    return isinstance(exc, (StoreError, sqlite3.Error, OSError)) or type(exc).__module__.startswith(
        ("psycopg", "psycopg_pool"))


def refused(exc: Exception) -> ApiError:
    """What a client is told of a failure inside the proxy: the problem named, never a path, a
    database address or a secret (those go to the log, under the incident's id)."""
    if isinstance(exc, OptictxError) and isinstance(exc, ValueError):  # its own request: said as it is
        return ApiError(f"optictx: {exc}", status=400)
    if store_trouble(exc):
        code = incident("the conversation store could not be used", "store unavailable")
        return ApiError(f"optictx: the conversation store is unavailable or damaged (incident {code}, in the "
                        "proxy's log); retry later", status=503, kind="overloaded_error", retry_after=5)
    code = incident("a request failed", "internal error")
    return ApiError(f"optictx: an internal error (incident {code}, in the proxy's log)", status=500,
                    kind="api_error")


async def answered(dialect: Dialect, work: Callable[[], Awaitable[Response]]) -> Response:
    """`work`'s response, or an error in `dialect`'s shape: never a bare 500 (after one, a server
    would reset the connection, and the client's next request on it fails too)."""
    try:
        return await work()
    except ApiError as exc:
        return error(dialect, exc)
    except Exception as exc:
        return error(dialect, refused(exc))
