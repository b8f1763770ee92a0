"""What a request must be before the proxy reads it: from loopback or with the proxy key, for
this host (DNS rebinding) and not from a web page (Origin), JSON on the API routes, framed one
way only (request smuggling), within the bytes the proxy takes at once, and a JSON object. Each
refusal is an ApiError. What the body says is the dialect's to read (`read`): a body the proxy
does not wholly understand, duplicate keys included, goes upstream as it came, never stored (so
what is stored and what is sent agree)."""

from __future__ import annotations

import hmac
import json
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import ClientDisconnect, Request

from .config import ServeConfig, is_loopback
from .dialect import UNKNOWN_SHAPE, ApiError, Dialect, Parsed, Unknown

LOCKED = "this proxy takes requests with its key only (X-Optictx-Key)"


def allowed(request: Request, config: ServeConfig) -> bool:
    """With a proxy key, the request presents it; without one, it comes from loopback."""
    if config.proxy_key:
        return hmac.compare_digest(request.headers.get("x-optictx-key", "").encode(), config.proxy_key.encode())
    return request.client is not None and is_loopback(request.client.host)


def _hostname(value: str) -> str:
    """The host of a Host header or an Origin ("" when it has none)."""
    try:
        return urlsplit(value if "//" in value else "//" + value).hostname or ""
    except ValueError:
        return ""


def local_only(request: Request, config: ServeConfig) -> None:
    """On a keyless proxy, only a client on this machine that names it as loopback: a page that
    rebinds its own name to 127.0.0.1 sends its own name as Host, and a browser says where a
    request comes from in Origin (a page can POST anywhere, but not with loopback's Origin)."""
    if config.proxy_key:
        return  # a page cannot know the key: the key is the guard
    host = request.headers.get("host", "")
    if not is_loopback(_hostname(host)):
        raise ApiError(f"Host {host[:80]!r} is not loopback: this proxy answers to 127.0.0.1, ::1 or localhost "
                       "(a guard against DNS rebinding; serve with --allow-remote and a proxy key otherwise)",
                       status=403, kind="permission_error")
    origin = request.headers.get("origin")
    if origin is not None and not is_loopback(_hostname(origin)):
        raise ApiError(f"Origin {origin[:80]!r}: this proxy takes no requests from web pages on other hosts",
                       status=403, kind="permission_error")


def framed(request: Request) -> None:
    """One body length, said one way: a request with both Content-Length and Transfer-Encoding
    (or two lengths) is read differently by different servers, so it is refused and its
    connection closed (what follows on it cannot be trusted)."""
    names = [k.lower() for k, _ in request.headers.raw]
    lengths = {v for k, v in request.headers.raw if k.lower() == b"content-length"}
    if (b"transfer-encoding" in names and b"content-length" in names) or len(lengths) > 1:
        raise ApiError("the request gives its length twice (Content-Length with Transfer-Encoding, or two "
                       "Content-Lengths); send one", close=True)


# A client's headers, bounded as a front server bounds them: real clients send a few dozen and a
# few kilobytes; ten thousand of them would be forwarded and refused upstream after a wait.
MAX_HEADERS, MAX_HEADER_BYTES = 100, 32 * 1024


def headers_bounded(request: Request) -> None:
    raw = request.headers.raw
    size = sum(len(k) + len(v) + 4 for k, v in raw)
    if len(raw) > MAX_HEADERS or size > MAX_HEADER_BYTES:
        raise ApiError(f"the request has {len(raw)} headers in {size} bytes: this proxy takes at most "
                       f"{MAX_HEADERS} in {MAX_HEADER_BYTES}", status=431, kind="invalid_request_error")


def json_typed(request: Request) -> None:
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        raise ApiError(f"Content-Type {media or '(none)'!r}: the API routes take application/json",
                       status=415, kind="invalid_request_error")


class InFlight:
    """Request bytes held at once across all requests, at most `limit`: a request that would
    go over waits for none of them and is told to come back (503, Retry-After). Used on the
    event loop only, so a plain counter."""

    def __init__(self, limit: int) -> None:
        self.limit, self.held = limit, 0

    def take(self, n: int) -> None:
        if self.held + n > self.limit:
            raise ApiError(f"the proxy holds {self.limit} request bytes at once (--max-inflight-bytes) and is full; "
                           "retry shortly", status=503, kind="overloaded_error", retry_after=1)
        self.held += n

    def give(self, n: int) -> None:
        self.held -= n


async def body(request: Request, limit: int, inflight: InFlight) -> bytes:
    """The body, at most `limit` bytes, counted in `inflight` while it is read (the caller gives
    them back with `inflight.give(len(body))` when the request is done)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(f"the request body is {declared[:20]} bytes; this proxy takes at most {limit} "
                       "(--max-body-bytes)", status=413, kind="request_too_large")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            if size + len(chunk) > limit:
                raise ApiError(f"the request body is over {limit} bytes (--max-body-bytes)", status=413,
                               kind="request_too_large")
            inflight.take(len(chunk))
            size += len(chunk)
            chunks.append(chunk)
    except ClientDisconnect:
        inflight.give(size)
        raise ApiError("the client left before its request was read", status=400) from None
    except BaseException:
        inflight.give(size)
        raise
    return b"".join(chunks)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise Unknown(f"the key {key[:60]!r} twice in one object")
        out[key] = value
    return out


def loads(raw: bytes) -> Any:
    """The body as JSON (ApiError when it is not). An object with a key twice is Unknown: a proxy
    that kept the last one while the upstream kept the first would store one request and send
    another, so such a request goes as it came, never stored."""
    try:
        return json.loads(raw, object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as exc:  # Unknown (a key twice) is neither
        raise ApiError(f"the request body is not JSON ({str(exc)[:120]})") from exc


def read(dialect: Dialect, raw: bytes) -> Parsed:
    """A request parsed by its API's dialect. Only a body that is not a JSON object is refused
    (ApiError): one the proxy does not wholly understand goes upstream as it came
    (`Parsed.passthrough`), since the upstream may well take it."""
    try:
        body = loads(raw)
    except Unknown as exc:
        try:
            body = json.loads(raw)  # what a lenient upstream reads; the proxy keeps none of it
        except (ValueError, RecursionError) as bad:
            raise ApiError(f"the request body is not JSON ({str(bad)[:120]})") from bad
        return Parsed.as_it_came(body, raw, UNKNOWN_SHAPE.format(where=exc.where))
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    try:
        return dialect.parse(body, raw)
    except Unknown as exc:
        return Parsed.as_it_came(body, raw, UNKNOWN_SHAPE.format(where=exc.where))
