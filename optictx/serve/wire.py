"""The HTTP connection under the proxy: uvicorn's h11 protocol with a deadline on each request's
head.

uvicorn (0.55) bounds an idle keep-alive connection but not a request whose headers arrive a
byte at a time: such a client holds a connection, and its buffer, for as long as it likes, and
a few hundred of them exhaust the proxy's file descriptors (slowloris). Here every request head,
the first on a connection and each after a keep-alive, must be whole within `head_timeout`
seconds of its first byte, or the connection is closed. The body and a long answer are not
bounded here: a large body may take its time once its head has come.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("optictx.serve")


class _HeadDeadline(H11Protocol):
    head_timeout = 10.0  # set per server by `protocol`

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._deadline is None and self.conn.their_state is h11.IDLE:
            self._deadline = self.loop.call_later(self.head_timeout, self._head_late)
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE and self._deadline is not None:
            self._deadline.cancel()  # the head is whole
            self._deadline = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        super().connection_lost(exc)

    def _head_late(self) -> None:
        self._deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            log.info("closed a connection whose request headers took over %.0f s", self.head_timeout)
            self.transport.close()


def protocol(head_timeout: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with this deadline on every request head."""
    return type("HeadDeadline", (_HeadDeadline,), {"head_timeout": head_timeout})


def uvicorn_config(app: Any, *, host: str, port: int, head_timeout: float, **options: Any) -> uvicorn.Config:
    """The uvicorn settings `optictx serve` runs `app` with (`options`: uvicorn's own)."""
    return uvicorn.Config(app, host=host, port=port, http=protocol(head_timeout), **options)
