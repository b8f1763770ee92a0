"""The bill of each request, both ways, in base-input tokens (a cache read at 0.05x counts a
twentieth of an uncached token) and in dollars: what optictx sends, priced by the provider's cache
rules at the request's own model's prices (`money.for_model`), beside what sending the
conversation as it came would cost under the same rules and prices; and what the upstream says it
billed (`Usage`, from its answer, streamed or not), priced the same way."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..context import Context
from ..money import TTL, dollars, for_model
from ..pieces import common_prefix
from ..prefix import tokens_per_piece
from ..promptcache import Bill, CachePricing, pricing_for


@dataclass(frozen=True)
class Charge:
    """One request's modeled input cost: optictx's prompt and the conversation as it came."""

    optictx: float
    passthrough: float
    optictx_usd: float | None = None
    passthrough_usd: float | None = None
    why: str | None = None  # what made it cost more than an append: a cold cache, the client's own front
    prices: str | None = None  # whose prices: the model's own (None), else the family's that stood in

    def header(self) -> str:
        usd = (f"; usd {self.optictx_usd:.6f}/{self.passthrough_usd:.6f}"
               if self.optictx_usd is not None and self.passthrough_usd is not None else "")
        return f"{self.optictx:.0f}/{self.passthrough:.0f}{usd}"


class Meter:
    """One conversation's running model of the provider's cache: the last prompt optictx sent and
    the size of the conversation as it came at the last request, and when that was. The client
    is taken to mark its newest block (as Claude Code does): a prefix sent before is read, the
    rest written, unless the cache's lifetime passed since the last request (then all of it is
    written, both ways)."""

    def __init__(self) -> None:
        self._last: Context | None = None
        self._original = self._sent = 0
        self._at = 0.0
        self._front: str | None = None

    def charge(self, ctx: Context | None, original: int, sent: int, vision: str, model: str, at: float,
               front: str = "", ttl: TTL = "5m") -> Charge:
        """`original`, `sent`: the request as it came and as sent, under the cost model, both
        with what it carries beside its messages (its tools). `front`: a digest of what the
        client sends before its messages (tools, a system prompt outside them): when it changed
        since the last request, nothing after it is read back, on either side. `ttl`: the
        lifetime the client's breakpoints ask for (`"1h"`: dearer writes that live an hour)."""
        pricing = rules(vision, model, ttl)
        why = None
        if pricing.cold(self._at, at):  # nothing is read back
            self._last, self._original, self._sent, why = None, 0, 0, "cold cache"
        elif self._front is not None and front != self._front:
            self._last, self._original, self._sent, why = None, 0, 0, "the client changed its tools or system prompt"
        self._at, self._front = at, front
        passthrough = pricing.prompt(original, min(self._original, original))
        if ctx is None:  # it went as it came
            ours = passthrough
        elif ctx.verbatim:  # the conversation as it came (its instructions drawn, `sent` says)
            after = self._last is not None and not self._last.verbatim  # a compacted prompt: nothing is read
            ours = pricing.prompt(sent, 0 if after else min(self._sent, sent))
        else:
            # What the request carries beside its messages (tool definitions) goes first and as
            # it came, on both sides: `original` counts it, and so must optictx's prompt. It is
            # below 0 where the instructions went drawn (`--image-instructions`): the context
            # counts them as text, and they are in front, read back with the first piece.
            extra, per = sent - ctx.tokens, tokens_per_piece(ctx)
            common = extra + sum(per[: common_prefix(ctx.pieces, self._last.pieces)]) if self._last is not None else 0
            ours = pricing.prompt(sent, min(sent, max(0, common)))
        self._last, self._original, self._sent = ctx, original, sent
        return Charge(ours.cost, passthrough.cost, dollars(ours, model, pricing), dollars(passthrough, model, pricing),
                      why, None if pricing.model else f"{pricing.name} family's")

    def resent(self) -> None:
        """The last request went again as the client sent it (its pages were refused): the cache
        now holds that prompt, not optictx's."""
        self._last, self._sent = None, self._original


def rules(vision: str, model: str, ttl: TTL = "5m") -> CachePricing:
    """The cache a request of `model` priced by `vision` meets: its family's mechanics at the
    model's own prices."""
    return for_model(pricing_for(vision), model, ttl)


# Counts an upstream reports are taken as fact only within these: a token costs a request at
# least a byte of its body (text, base64), so more input tokens than 4 bytes each of what went up,
# with room for what a provider adds and for images sent by URL (a URL of a few bytes is up to
# about 2,500 tokens: Claude's 1.15 MP, gpt-4.1-mini's patches), is no count but a fault or a lie.
MAX_COUNT = 10**10
SLACK = 4096
PER_IMAGE = 2500


def allowance(body: bytes) -> int:
    """The most input tokens a request body could carry (`Usage.doubted`): every mention of an
    image counted as an image sent by URL, which overcounts, never under."""
    return 4 * len(body) + SLACK + PER_IMAGE * body.count(b"image")


@dataclass(frozen=True)
class Usage:
    """What the upstream billed for one request's input and output, from its answer. `doubt`:
    why these counts are not taken as fact (then they are kept, said, and never priced)."""

    input: int = 0  # uncached input (Anthropic: after the last breakpoint)
    cache_read: int = 0
    cache_write: int = 0  # every write, the 1-hour ones included
    output: int = 0
    doubt: str | None = None
    cache_write_1h: int = 0  # of `cache_write`, those asked to live an hour (Anthropic's `"ttl": "1h"`)

    def bill(self, pricing: CachePricing) -> Bill:
        """These counts as a bill at `pricing`'s multipliers (a model's own: `money.for_model`)."""
        return pricing.priced(self.input, self.cache_read, self.cache_write, self.cache_write_1h)

    def to_json(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items()
                           if (k != "doubt" or v is not None) and (k != "cache_write_1h" or v)})

    def doubted(self, most: int | None) -> str | None:
        """Why these counts are not fact for a request that could carry `most` input tokens
        (`allowance`; None: they are)."""
        total = self.input + self.cache_read + self.cache_write
        if self.doubt is None and most is not None and total > most:
            return f"{total} input tokens reported for a request that could carry at most {most}"
        return self.doubt


def usage_record(usage: Usage | None, vision: str, model: str, most: int | None = None) -> dict[str, Any]:
    """The ledger's fields for what the upstream billed (none when it reported nothing) to a
    request that could carry at most `most` input tokens (`allowance`): counts it could not
    have carried are recorded as not known."""
    if usage is None:
        return {}
    doubt = usage.doubted(most)
    if doubt is None:
        try:
            pricing = rules(vision, model)
            bill = usage.bill(pricing)
            return {"usage": usage.to_json(), "billed": bill.cost, "billed_usd": dollars(bill, model, pricing)}
        except (ValueError, ArithmeticError) as exc:  # the price library's word on counts it will not price
            doubt = f"not priced: {str(exc)[:80]}"
    return {"usage": replace(usage, doubt=doubt).to_json()}


def usage_of(api: str, body: Any) -> Usage | None:
    """The usage in an answer's JSON (a whole answer, or one stream event's data), or None; a
    count that is not a whole number from 0 to `MAX_COUNT` (a bool is not one), or cached tokens
    above the prompt's, make it doubted (`Usage.doubt`)."""
    if not isinstance(body, dict):
        return None
    u = body.get("usage")
    if u is None:  # Anthropic's message_start holds it in its message, the Responses API's
        #            response.completed in its response
        held = body.get("message" if api == "anthropic" else "response")
        u = held.get("usage") if isinstance(held, dict) else None
    if not isinstance(u, dict):
        return None
    doubts: list[str] = []

    def n(key: str, within: dict[str, Any] = u) -> int:
        value = within.get(key)
        if value is None:
            return 0
        if type(value) is not int or not 0 <= value <= MAX_COUNT:
            doubts.append(f"{key} {str(value)[:24]}")
            return 0
        return value

    if api == "anthropic":
        split = u.get("cache_creation")  # by lifetime: ephemeral_5m_input_tokens, ephemeral_1h_input_tokens
        hour = n("ephemeral_1h_input_tokens", split) if isinstance(split, dict) else 0
        usage = Usage(n("input_tokens"), n("cache_read_input_tokens"), n("cache_creation_input_tokens"),
                      n("output_tokens"), cache_write_1h=hour)
    else:
        details = u.get("prompt_tokens_details") or u.get("input_tokens_details") or {}
        if not isinstance(details, dict):  # doubted as Anthropic's counts of the wrong kind are
            doubts.append(f"input_tokens_details {str(details)[:24]}")
        cached = n("cached_tokens", details) if isinstance(details, dict) else 0
        prompt = n("prompt_tokens") if "prompt_tokens" in u else n("input_tokens")
        if cached > prompt:
            doubts.append(f"cached_tokens {cached} above the prompt's {prompt}")
        output = n("completion_tokens") if "completion_tokens" in u else n("output_tokens")
        usage = Usage(max(0, prompt - cached), min(cached, prompt), 0, output)
    return replace(usage, doubt="; ".join(doubts)) if doubts else usage


def event_data(events: bytes) -> Iterator[bytes]:
    """The data of each whole server-sent event in `events`: its `data:` lines' values joined
    with newlines, as the SSE standard has it (one event's JSON may span several lines)."""
    for event in re.split(rb"\r?\n\r?\n", events):
        lines = [line.rstrip(b"\r") for line in event.split(b"\n")]
        values = [line[6:] if line.startswith(b"data: ") else line[5:] for line in lines if line.startswith(b"data:")]
        if values:
            yield b"\n".join(values)


class StreamUsage:
    """Usage gathered from a stream's events: Anthropic sends it in `message_start` and updates
    it in `message_delta`; OpenAI's Chat Completions in a last chunk (with
    `stream_options.include_usage`), its Responses API in `response.completed`."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.usage: Usage | None = None

    def feed(self, events: bytes) -> None:
        if b'"usage"' not in events:
            return
        for data in event_data(events):
            try:
                found = usage_of(self.api, json.loads(data))
            except (ValueError, RecursionError):
                continue
            if found is not None:
                self.usage = found if self.usage is None else _merged(self.usage, found)


def _merged(old: Usage, new: Usage) -> Usage:
    """A later event's counts over an earlier one's, where it gives them (message_delta may give
    only output_tokens)."""
    return Usage(*(b or a for a, b in zip(asdict(old).values(), asdict(new).values())))
