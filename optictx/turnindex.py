"""What a memory knows of every turn it took in, kept as they arrive (append-only): each turn's
native text tokens and its images' sizes, the system and pinned turns, and so what the whole
conversation costs sent as it came, under any cost model."""

from __future__ import annotations

from collections.abc import Iterable

from .cost import CostModel
from .errors import StoreError
from .native import image_sizes, images_cost
from .tokens import Tokenizer
from .turns import Turn

Sizes = tuple[tuple[int, int] | None, ...]


def text_tokens(turn: Turn, tok: Tokenizer) -> int:
    """Text tokens of a turn as the consumer reads it natively (content and tool calls)."""
    return sum(tok.count(s) for s in turn.texts)


class TurnIndex:
    """Per-turn facts by id (ids count 0, 1, 2, ... as stores give them)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.system: list[Turn] = []
        self.pinned: list[Turn] = []
        self.tokens: list[int] = []  # turn id -> its native text tokens
        self.images: dict[int, Sizes] = {}  # turn id -> its images' sizes, for turns that have any
        self.text_total = 0

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def last_id(self) -> int:
        return len(self.tokens) - 1

    def note(self, turn: Turn) -> bool:
        """Take in the next turn; True when it is neither a system nor a pinned turn (it goes
        to the recent turns, and on to pages)."""
        if turn.id != len(self.tokens):
            raise StoreError(f"the store returned turn {turn.id} after turn {self.last_id}: ids must follow "
                             "one another; the store is damaged or not an optictx store")
        n = text_tokens(turn, self.tokenizer)
        self.tokens.append(n)
        self.text_total += n
        if sizes := image_sizes(turn):
            self.images[turn.id] = sizes
        if turn.role == "system" or turn.pinned:
            (self.system if turn.role == "system" else self.pinned).append(turn)
            return False
        return True

    def of(self, turns: Iterable[Turn]) -> tuple[dict[int, int], dict[int, Sizes]]:
        """The native tokens and the image sizes of `turns`, by id."""
        ids = [t.id for t in turns]
        return {i: self.tokens[i] for i in ids}, {i: self.images[i] for i in ids if i in self.images}  # type: ignore[index]

    def all_images(self) -> tuple[tuple[int, int] | None, ...]:
        return tuple(s for sizes in self.images.values() for s in sizes)

    def original_tokens(self, cost: CostModel) -> int:
        """What the whole conversation costs sent as it came, under `cost`."""
        return self.text_total + sum(images_cost(sizes, cost) for sizes in self.images.values())
