"""Upstream calls: the fitted body goes out, the answer comes back as it arrives, with its
status and headers. An upstream error keeps its status (429 stays 429, with Retry-After); a
failure in the middle of a stream ends it with the API's own error event."""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from urllib.parse import urlsplit

import anyio
import httpx
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response, StreamingResponse

from .answer import StreamText, header_value, text_of
from .dialect import ApiError, Dialect
from .meter import StreamUsage, Usage, usage_of
from .refusals import Refusal

log = logging.getLogger("optictx.serve")

# Hop-by-hop headers (RFC 9110 section 7.6.1) and those the proxy sets itself.
_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
                  "transfer-encoding", "upgrade", "host", "content-length", "content-encoding", "accept-encoding"})


# Never relayed from the upstream: its cookies are for a browser talking to it, not to the proxy's
# clients; the proxy's own server says Date and Server once.
_NOT_IN = frozenset({"set-cookie", "set-cookie2", "date", "server"})


def _hop(headers: Mapping[str, str]) -> frozenset[str]:
    """Hop-by-hop headers: the fixed ones and those the message names in its Connection header."""
    named = {n.strip().lower() for k, v in headers.items() if k.lower() == "connection" for n in v.split(",")}
    return _HOP | named


def outgoing(headers: Mapping[str, str]) -> dict[str, str]:
    """The client's headers for upstream: its credentials and API versions pass through; the
    proxy's own (X-Optictx-*) and hop-by-hop ones do not."""
    hop = _hop(headers)
    out = {k: v for k, v in headers.items() if k.lower() not in hop and not k.lower().startswith("x-optictx-")}
    out["accept-encoding"] = "identity"  # relayed as it arrives, never re-encoded
    return out


def incoming(headers: httpx.Headers) -> dict[str, str]:
    """The upstream's headers for the client, less hop-by-hop ones, its cookies, Date and Server
    (the proxy's own say those), and any that would pass for the proxy's own (X-Optictx-*)."""
    hop = _hop(headers) | _NOT_IN
    return {k: v for k, v in headers.items() if k.lower() not in hop and not k.lower().startswith("x-optictx-")}


def shown(url: str) -> str:
    """`url` as a client may see it: scheme, host, port and path; never its user, password,
    query (an `?api-key=`) or fragment."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(the upstream)"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}{port}{parts.path}"


# Awaited once an answer is all read, with its usage, status and text; what it returns (headers)
# goes with a whole answer (a stream's headers are gone by then).
Done = Callable[[Usage | None, int, str], Awaitable[Mapping[str, str] | None]]


def _read(api: str, content: bytes) -> tuple[Usage | None, str]:
    try:
        body = json.loads(content)
    except (ValueError, RecursionError):
        return None, ""
    return usage_of(api, body), text_of(api, body)


_PIECE = 2**16  # bytes inflated at a time from a compressed answer

# A stream is relayed in whole events; a stream that has no event boundary this far is not
# made of events, and goes on as it arrives.
_MAX_EVENT = 2**20


def _boundary(data: bytearray, start: int) -> int:
    """Where the last event boundary in `data` at or after `start` ends (0: none there)."""
    ends = [at + len(mark) for mark in (b"\n\n", b"\r\n\r\n") if (at := data.rfind(mark, start)) >= 0]
    return max(ends, default=0)


def _ours(headers: Mapping[str, str]) -> dict[str, str]:
    """The proxy's own headers on an answer, each written as every HTTP stack takes it
    (`answer.header_value`): the one place they are written."""
    return {k: header_value(v) for k, v in headers.items()}


class Upstream:
    def __init__(self, base: str, timeout: float, max_answer: int = 256 * 2**20) -> None:
        self.base, self.max_answer = base.rstrip("/"), max_answer
        self.shown = shown(self.base)
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)))

    def _unreachable(self, exc: httpx.HTTPError) -> ApiError:
        # What went wrong in detail (it may quote the URL with its credentials) goes to the log only.
        log.warning("upstream %s: %s: %s", self.shown, type(exc).__name__, str(exc).replace(self.base, self.shown))
        if isinstance(exc, httpx.TimeoutException):
            return ApiError(f"upstream {self.shown} did not answer in time ({type(exc).__name__})", status=504,
                            kind="timeout_error")
        return ApiError(f"upstream {self.shown} unreachable ({type(exc).__name__})", status=502, kind="api_error")

    async def _decoded(self, r: httpx.Response) -> AsyncIterator[bytes]:
        """The answer's bytes as it arrives, decoded should the upstream compress it anyway (the
        proxy asks for identity): at most `_PIECE` bytes inflated at a time, so a small
        compressed answer that inflates to gigabytes is stopped by the caller's bound before it
        is in memory, never after. An encoding it cannot decode is a 502."""
        coding = r.headers.get("content-encoding", "").strip().lower()
        if coding in ("", "identity"):
            async for chunk in r.aiter_raw():
                yield chunk
            return
        if coding not in ("gzip", "x-gzip", "deflate"):
            raise ApiError(f"upstream {self.shown} answered in the {coding[:40]!r} encoding, which this proxy does "
                           "not decode (it asks for identity)", status=502, kind="api_error")
        inflate = zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib, told by the header
        async for chunk in r.aiter_raw():
            data = chunk
            while data:
                try:
                    out = inflate.decompress(data, _PIECE)
                except zlib.error as exc:
                    raise ApiError(f"upstream {self.shown} sent a damaged {coding} answer", status=502,
                                   kind="api_error") from exc
                data = inflate.unconsumed_tail
                if out:
                    yield out
        if rest := inflate.flush():
            yield rest

    async def _whole(self, r: httpx.Response) -> bytes:
        """A whole answer, at most `max_answer` bytes (ApiError beyond, the rest unread)."""
        chunks, size = [], 0
        try:
            async for chunk in self._decoded(r):
                size += len(chunk)
                if size > self.max_answer:
                    raise ApiError(f"upstream {self.shown} answered over {self.max_answer} bytes; this proxy relays "
                                   "at most that (--max-answer-bytes), or a stream of any length", status=502,
                                   kind="api_error")
                chunks.append(chunk)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from exc
        finally:
            await r.aclose()
        return b"".join(chunks)

    async def get(self, path: str, headers: Mapping[str, str]) -> Response:
        try:
            r = await self.client.send(self.client.build_request("GET", self.base + path, headers=outgoing(headers)),
                                       stream=True)
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from exc
        if r.is_redirect:
            await r.aclose()
            raise self._redirected(r.status_code)
        return Response(await self._whole(r), r.status_code, incoming(r.headers))

    def _redirected(self, status: int) -> ApiError:
        # The API has no redirects: relayed, a client would follow one with its key to anywhere.
        return ApiError(f"upstream {self.shown} answered {status} (a redirect); this proxy does not follow or "
                        "relay redirects: check --upstream", status=502, kind="api_error")

    async def post(self, path: str, body: bytes, headers: Mapping[str, str], stream: bool, dialect: Dialect,
                   extra: Mapping[str, str], done: Done | None = None, *, reads: bool = False,
                   refusal: Refusal | None = None) -> Response:
        """The upstream's answer to `body`, streamed as it arrives when `stream`. `done` is
        awaited with the usage the answer reports (None: it reports none) once it is all read:
        at once for a whole answer, when the stream ends for a stream; with its text too when
        `reads` (a check will read it: otherwise a stream's text is not gathered). `refusal`:
        where the upstream refuses the pages `body` carries before anything reached the client,
        its body goes instead, once (`refusals.py`)."""
        r = await self._send(path, body, headers, done)
        content: bytes | None = None
        if refusal is not None and (not stream or r.status_code >= 400):
            content = await self._read_whole(r, done)
            if refusal.check(r.status_code, content):
                log.info("upstream %s refused the pages (%s): sent as the client sent it", self.shown, refusal.why)
                r, content, extra = await self._send(path, refusal.body, headers, done), None, {
                    **extra, **refusal.headers()}
        answer = {**incoming(r.headers), **_ours(extra)}
        if not stream or r.status_code >= 400:
            if content is None:
                content = await self._read_whole(r, done)
            if done is not None:
                usage, text = (await run_in_threadpool(_read, dialect.provider, content) if r.status_code < 400
                               else (None, ""))  # off the event loop: an answer may be large
                answer.update(_ours(await done(usage, r.status_code, text) or {}))
            return Response(content, r.status_code, answer)
        return StreamingResponse(self._relay(r, dialect, done, reads), r.status_code, answer)

    async def _send(self, path: str, body: bytes, headers: Mapping[str, str], done: Done | None) -> httpx.Response:
        """The upstream's answer to `body`, its head read, its body not (`_whole` or `_relay`)."""
        send = {**outgoing(headers), "content-type": "application/json"}
        request = self.client.build_request("POST", self.base + path, content=body, headers=send)
        try:
            r = await self.client.send(request, stream=True)  # read by `_whole` or relayed: never at once
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from exc
        if r.is_redirect:
            await r.aclose()
            if done is not None:
                await done(None, 502, "")
            raise self._redirected(r.status_code)
        return r

    async def _read_whole(self, r: httpx.Response, done: Done | None) -> bytes:
        try:
            return await self._whole(r)
        except ApiError:
            if done is not None:
                await done(None, 502, "")
            raise

    async def _relay(self, r: httpx.Response, dialect: Dialect, done: Done | None,
                     reads: bool = False) -> AsyncIterator[bytes]:
        """Whole events as they arrive: should upstream break off, the half event it left is
        dropped and an error event ends the stream (a client never parses half of one)."""
        tail = bytearray()  # what arrived after the last whole event; searched once per byte
        usage, said = StreamUsage(dialect.provider), StreamText(dialect.provider) if reads else None
        try:
            async for chunk in self._decoded(r):  # decoded, should upstream encode anyway
                start = max(0, len(tail) - 3)  # a boundary may straddle the chunks
                tail += chunk
                end = _boundary(tail, start) or (len(tail) if len(tail) > _MAX_EVENT else 0)
                if end:
                    out = bytes(tail[:end])
                    del tail[:end]
                    usage.feed(out)
                    if said is not None:
                        said.feed(out)
                    yield out
            if tail:
                usage.feed(bytes(tail))
                if said is not None:
                    said.feed(bytes(tail))
                yield bytes(tail)
        except httpx.HTTPError as exc:
            log.warning("upstream stream from %s broke: %s", self.shown, exc)
            yield dialect.stream_error(f"the upstream stream broke off ({type(exc).__name__}); try again")
        except ApiError as exc:  # an answer it cannot decode: said as the stream's last event
            yield dialect.stream_error(str(exc))
        finally:
            # A client that leaves cancels this stream: the bookkeeping is shielded from that.
            with anyio.CancelScope(shield=True):
                await r.aclose()
                if done is not None:
                    await done(usage.usage, r.status_code, said.text if said is not None else "")

    async def close(self) -> None:
        await self.client.aclose()
