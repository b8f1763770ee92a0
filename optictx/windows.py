"""Each model's context window: how many tokens its input and output share, the most output it
writes, and where its provider starts billing the whole request at a higher tier. The proxy's
default cap on a request's context follows from them (`cap_for`): the window less the output,
and below the tier, so a memory never grows a prompt the model cannot take, nor one billed at
twice the price per token. A `--budget` given replaces it (a quality ceiling a user may set
lower). One line per model, with the page it was read from and the date.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType

# The cap for a model not listed here: under every current model's window.
DEFAULT_CAP = 128_000


@dataclass(frozen=True)
class Window:
    """One model's window. `tier`: the input tokens past which every token of the request is
    billed at a higher price (None: one price to the window's end)."""

    context: int
    output: int
    tier: int | None = None
    source: str = field(default="", repr=False)

    @property
    def cap(self) -> int:
        """The most context tokens a request may carry: room for the longest answer, and no
        token in the long-context tier."""
        room = self.context - self.output
        return min(room, self.tier) if self.tier is not None else room


def _claude(model: str, read: str) -> str:
    return f"platform.claude.com/docs/en/models/{model}/overview (read {read})"


_READ = "2026-12-07"
_OPENAI_5_5 = ("docs.oxen.ai/inference-api/reference/models/gpt-5-5-2026-04-23 (1,050,000 tokens; past 272K input "
               "2x, read 2026-12-07)")

# Keys are model-name prefixes; the longest that begins a request's model name is its window
# (`claude-sonnet-4-5-20250929` is `claude-sonnet-4-5`'s, `gpt-5.5` not `gpt-5`'s).
WINDOWS: MappingProxyType[str, Window] = MappingProxyType({
    "claude-opus-5-5": Window(1_000_000, 128_000, source=_claude("opus-5-5", _READ)),
    "claude-opus-5": Window(1_000_000, 128_000, source=_claude("opus-5", _READ)),
    "claude-sonnet-5-5": Window(1_000_000, 128_000, source=_claude("sonnet-5-5", _READ)),
    "claude-sonnet-5": Window(1_000_000, 128_000, source=_claude("sonnet-5", _READ)),
    "claude-opus-4-5": Window(200_000, 64_000, source=_claude("opus-4-5", _READ)),
    # 200K standard; its 1M beta bills past 200K at twice the input price (genai-prices' data).
    "claude-sonnet-4-5": Window(200_000, 64_000, 200_000, source=_claude("sonnet-4-5", _READ)),
    "claude-haiku-4-5": Window(200_000, 64_000, source=_claude("haiku-4-5", _READ)),
    "gpt-4o": Window(128_000, 16_384, source="platform.openai.com/docs/models/gpt-4o (read 2026-12-07)"),
    "gpt-4.1": Window(1_047_576, 32_768, source="platform.openai.com/docs/models/gpt-4.1 (read 2026-12-07)"),
    "gpt-5": Window(400_000, 128_000, source="platform.openai.com/docs/models/gpt-5 (read 2026-12-07)"),
    "gpt-5.5": Window(1_050_000, 128_000, 272_000, source=_OPENAI_5_5),
})


def window_for(model: str | None) -> Window | None:
    """The window of `model` (its longest listed prefix), or None where it is not listed."""
    if not model:
        return None
    known = [k for k in WINDOWS if model.startswith(k)]
    return WINDOWS[max(known, key=len)] if known else None


def cap_for(model: str | None) -> int:
    """The default cap on a request's context for `model` (`Window.cap`; `DEFAULT_CAP` where the
    model is not listed)."""
    window = window_for(model)
    return window.cap if window is not None else DEFAULT_CAP
