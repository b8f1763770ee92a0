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
from .native import IMAGE_PARTS
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


def _parts(seg: object) -> list[dict]:
    """What a text segment's turn carries beside its text (a client's images)."""
    turn = seg.turn if isinstance(seg, TextSegment) else None
    content = turn.content if turn is not None else None
    return [p for p in content if p.get("type") != "text"] if isinstance(content, list) else []


def _load(ctx: Context, page: Callable[[PageSegment], int], text: Callable[[str], int]) -> tuple[int, list[int]]:
    """The bytes of what `ctx` carries beside its page images (its text as `text` weighs it, its
    client's images as JSON), and each page image's as `page` weighs it, oldest first."""
    rest, pages = 0, []
    for seg in ctx.segments:
        if isinstance(seg, PageSegment) and seg.tier.is_image:
            pages.append(page(seg))
        else:
            rest += text(seg.text) + sum(len(json.dumps(p)) for p in _parts(seg))
    return rest, pages


def _worst_text(text: str) -> int:
    return 6 * len(text) + 2  # JSON's longest escape is six bytes


def _json_text(text: str) -> int:
    return len(json.dumps(text))  # ASCII-escaped: never shorter than the UTF-8 a body may use


def _sent(seg: PageSegment) -> int:
    return len(seg.images.image_base64(seg.page, seg.tier))


def _over(ctx: Context) -> tuple[int, list[int]] | None:
    """None when `ctx` is within its consumer's `max_request_bytes` (or it has none); else its
    load as sent (`_load`). Pages are encoded for it only where a bound on their bytes does not
    already settle it; the encodings are cached, and sending the context needs them anyway."""
    cap = ctx.vision.max_request_bytes
    if cap is None:
        return None
    for page, text in ((_worst_page, _worst_text), (_sent, _json_text)):
        rest, pages = _load(ctx, page, text)
        if rest + sum(pages) <= cap:
            return None
    return rest, pages


def within(ctx: Context) -> bool:
    """Whether `ctx` goes in a request its consumer takes: its page images as sent, its text as
    JSON and its client's images within `max_request_bytes` (always, with no limit)."""
    return _over(ctx) is None


def images_within(ctx: Context) -> int | None:
    """None when `ctx` is `within` its consumer's bytes; else the images (pages and the client's
    own, as `Limits.max_images` counts them) a context like it may hold: its newest pages that fit
    beside its text, fewer than it holds."""
    over = _over(ctx)
    if over is None:
        return None
    rest, pages = over
    room, fit = ctx.vision.max_request_bytes - rest, 0  # type: ignore[operator]
    for size in reversed(pages):  # newest first
        room -= size
        if room < 0:
            break
        fit += 1
    native = sum(1 for seg in ctx.segments for p in _parts(seg) if p.get("type") in IMAGE_PARTS)
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
