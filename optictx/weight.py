"""What a context weighs in a request's bytes, against the consumer's documented limit on them
(`CostModel.max_request_bytes`). An appended prompt over it is not sent (a compaction is), and a
plan over it is made again under an images cap it fits (`light`): pages give way, oldest first,
as they do to the images cap."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from .context import Context
from .pieces import PageSegment, TextSegment
from .policy import Policy


def _worst_page(seg: PageSegment) -> int:
    """More than a page image's base64 can be: its pixels at the bits its grey levels take, twice
    over, and base64's third (lossless WebP of a page holds about a tenth of that)."""
    cfg = seg.images.layout.config
    size = seg.tier.size_at(cfg.master)
    assert size is not None  # an image tier
    bits = max(1, (max(2, cfg.greys) - 1).bit_length())
    return (size[0] * size[1] * bits // 8 * 2 + 4096) * 4 // 3


def _parts(seg: TextSegment) -> list[dict]:
    """What a text segment's turn carries beside its text (a client's images)."""
    content = seg.turn.content if seg.turn is not None else None
    return [p for p in content if p.get("type") != "text"] if isinstance(content, list) else []


def _weight(ctx: Context, page: Callable[[PageSegment], int], text: Callable[[str], int]) -> int:
    total = 0
    for seg in ctx.segments:
        if isinstance(seg, PageSegment):
            total += page(seg) if seg.tier.is_image else text(seg.text)
        else:
            total += text(seg.text) + sum(len(json.dumps(p)) for p in _parts(seg))
    return total


def _worst_text(text: str) -> int:
    return 6 * len(text) + 2  # JSON's longest escape is six bytes


def _json_text(text: str) -> int:
    return len(json.dumps(text))  # ASCII-escaped: never shorter than the UTF-8 a body may use


def within(ctx: Context) -> bool:
    """Whether `ctx` goes in a request its consumer takes: its page images as sent, its text as
    JSON at its longest and its client images within `max_request_bytes` (always, with no limit).
    Pages are encoded for it only where a bound on their bytes does not already settle it; the
    encodings are cached, and sending the context needs them anyway."""
    cap = ctx.vision.max_request_bytes
    return cap is None or _weight(ctx, _worst_page, _worst_text) <= cap or _weight(ctx, _sent, _json_text) <= cap


def _sent(seg: PageSegment) -> int:
    return len(seg.images.image_base64(seg.page, seg.tier))


def images_within(ctx: Context) -> int | None:
    """None when `ctx` is `within` its consumer's bytes; else the images (pages and the client's
    own, as `Limits.max_images` counts them) a context like it may hold: its newest pages that fit
    beside its text, fewer than it holds."""
    if within(ctx):
        return None
    room = ctx.vision.max_request_bytes - _weight(ctx, lambda seg: 0, _json_text)  # type: ignore[operator]
    pages = [seg for seg in ctx.pages if seg.tier.is_image]
    fit = 0
    for seg in reversed(pages):  # newest first
        room -= _sent(seg)
        if room < 0:
            break
        fit += 1
    native = sum(1 for seg in ctx.segments if isinstance(seg, TextSegment) for p in _parts(seg)
                 if "image" in str(p.get("type")))
    return max(0, min(fit, len(pages) - 1)) + native


Made = TypeVar("Made", bound=tuple)


def light(make: Callable[[Policy], Made], policy: Policy, tries: int = 8) -> Made:
    """`make(policy)` (a tuple, its context first), made again under a lower images cap while
    its context weighs more than a request may: a tier sharpened by the room the pages left
    may take some of it back, so a few tries may be needed."""
    made, last = make(policy), None
    for _ in range(tries):
        cap = images_within(made[0])
        if cap is None or cap == last:  # within, or its text alone is over: no page left to give way
            break
        made, last = make(replace(policy, limits=policy.limits.model_copy(update={"max_images": cap}))), cap
    return made
