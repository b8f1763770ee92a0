"""Page images drawn ahead, while the upstream answers: a compaction sends every sealed page at
once, and the request it happens on would otherwise draw them all (`BENCHMARKS.md`, "Time on the
proxy path"). One background thread, one queued draw per conversation at a time; what it draws
goes into the conversation's own image cache, where the exporters find it."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from ..tiers import Tier

if TYPE_CHECKING:
    from .conversations import Conversation

log = logging.getLogger("optictx.serve")


class DrawAhead:
    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="optictx-draw")
        self._lock = threading.Lock()
        self._queued: set[str] = set()

    def after(self, conv: Conversation) -> None:
        """Queue a draw of the pages that sealed since the last draw, at the tier a compaction
        sends them (the ladder's oldest: every page at one tier, `prefix.for_compaction`)."""
        with self._lock:
            if conv.id in self._queued:
                return
            self._queued.add(conv.id)
        self._pool.submit(self._draw, conv)

    def _draw(self, conv: Conversation) -> None:
        try:
            memory = conv.memory
            tier = getattr(memory.ladder, "rest", Tier.TINY)
            sealed = [p for p in memory.pages if p.sealed] if tier.is_image else []
            for page in sealed[conv.drawn:]:
                if conv.closed:
                    break
                memory.images.image_base64(page, tier)
                conv.drawn += 1
        except Exception as exc:  # closed under it (evicted, shut down): nothing left to draw for
            log.debug("conversation %s: no pages drawn ahead (%s)", conv.id, type(exc).__name__)
        finally:
            with self._lock:
                self._queued.discard(conv.id)

    def wait(self) -> None:
        """Returns once every draw queued so far is done (benchmarks: the upstream's time)."""
        self._pool.submit(lambda: None).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
