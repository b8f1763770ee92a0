"""A refused page is never a failed request. When the upstream refuses a request that carries
pages (an HTTP 400, 413 or 422 about images or size, or a whole answer that is a refusal) and
nothing has reached the client yet, the proxy sends the conversation once more as the client
sent it, answers from that, and records it (`Refusal`); a model that refuses pages again and
again gets none for a while (`Refusals`), and every answer in that time says so.

A stream's answer is relayed as it arrives, so a refusal inside a stream that began is the
client's to see; an error status comes before any byte and is caught."""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field

REFUSING = (400, 413, 422)
# What an error about the pages says (Anthropic: "image exceeds 5 MB maximum", "too many images",
# request_too_large; OpenAI: "Invalid image", image_parse_error, payload too large).
_ABOUT_PAGES = re.compile(rb"image|too.large|too.many|exceed|payload|size", re.IGNORECASE)
TIMES = 3  # refusals of one model within WINDOW seconds that pause its pages
WINDOW = 600.0
PAUSE = 600.0  # seconds a model's pages stay off


def refused(status: int, content: bytes) -> str | None:
    """Why an answer is the upstream refusing the pages it was sent (None: it is not)."""
    if status in REFUSING and _ABOUT_PAGES.search(content[:4096]):
        return f"HTTP {status}: {_message(content)}"
    if status == 200 and b"refusal" in content:  # most answers are not: no parse on the event loop
        try:
            answer = json.loads(content)
        except (ValueError, RecursionError):
            return None
        if _is_refusal(answer):
            return "the model refused to answer"
    return None


def _message(content: bytes) -> str:
    try:
        error = json.loads(content).get("error")
        text = error.get("message") if isinstance(error, dict) else error
    except (ValueError, RecursionError, AttributeError):
        text = None
    return (text if isinstance(text, str) else content[:120].decode("utf-8", "replace"))[:160]


def _is_refusal(answer: object) -> bool:
    """Anthropic's `stop_reason: refusal`; an OpenAI message's `refusal`; a Responses output part
    of type `refusal`."""
    if not isinstance(answer, dict):
        return False
    if answer.get("stop_reason") == "refusal":
        return True
    for choice in answer.get("choices") or []:
        if isinstance(choice, dict) and isinstance(choice.get("message"), dict) and choice["message"].get("refusal"):
            return True
    return any(isinstance(part, dict) and part.get("type") == "refusal"
               for item in answer.get("output") or [] if isinstance(item, dict)
               for part in item.get("content") or [])


@dataclass
class Refusal:
    """One request's way back: `body`, the request as the client sent it, to send should the
    pages be refused; `why`, set when they were."""

    body: bytes
    why: str | None = None

    def check(self, status: int, content: bytes) -> bool:
        """Whether this answer refuses the pages (then `why` says how), once per request."""
        if self.why is None:
            self.why = refused(status, content)
            return self.why is not None
        return False

    def headers(self) -> dict[str, str]:
        return {"x-optictx-fallback": f"refused: {self.why}; sent as the client sent it"} if self.why else {}


@dataclass
class Refusals:
    """Per model, when the upstream refused its pages lately, and until when they are off."""

    times: int = TIMES
    window: float = WINDOW
    pause: float = PAUSE
    _seen: dict[str, list[float]] = field(default_factory=dict)
    _off: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, model: str, now: float | None = None) -> None:
        now = time.time() if now is None else now
        with self._lock:
            seen = [t for t in self._seen.get(model, []) if now - t < self.window] + [now]
            self._seen[model] = seen[-self.times :]
            if len(seen) >= self.times:
                self._off[model], self._seen[model] = now + self.pause, []

    def paused(self, model: str, now: float | None = None) -> str | None:
        """Why `model` gets no pages now (None: it does)."""
        now = time.time() if now is None else now
        with self._lock:
            until = self._off.get(model)
            if until is None or now >= until:
                self._off.pop(model, None)
                return None
        return (f"pages-paused: {model[:60]} refused pages {self.times} times; they are off for "
                f"{until - now:.0f} s more")
