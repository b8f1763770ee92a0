"""What a memory knows of every turn it took in, kept as they arrive (append-only): each turn's
native text tokens and its images' sizes, the system and pinned turns, the turns that stay text
in place, and so what the whole conversation costs sent as it came, under any cost model."""

from __future__ import annotations

from collections.abc import Iterable

from .cost import CostModel
from .errors import StoreError
from .native import image_sizes, images_cost
from .tokens import Tokenizer
from .turns import Turn

Sizes = tuple[tuple[int, int] | None, ...]


# A turn's metadata key that keeps it as it came, in place (`stays_in_place`): a proxy sets it on a
# message whose shape it does not fully understand, so that it is never drawn on a page.
AS_SENT = "optictx_as_sent"
# A turn's metadata key that keeps a person's words (`words.keep`) as text in place: never drawn on
# a page; the oldest of them give way first where a hard budget cannot hold them all (`plan.py`).
WORDS = "optictx_words"


def text_tokens(turn: Turn, tok: Tokenizer) -> int:
    """Text tokens of a turn as the consumer reads it natively (content and tool calls)."""
    return sum(tok.count(s) for s in turn.texts)


class TurnIndex:
    """Per-turn facts by id (ids count 0, 1, 2, ... as stores give them)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.system: list[Turn] = []
        self.pinned: list[Turn] = []
        self.inline: list[Turn] = []  # turns that stay text in place, oldest first (`note`)
        self.inline_ids: set[int] = set()
        self.tokens: list[int] = []  # turn id -> its native text tokens
        self.images: dict[int, Sizes] = {}  # turn id -> its images' sizes, for turns that have any
        self.text_total = 0

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def last_id(self) -> int:
        return len(self.tokens) - 1

    def note(self, turn: Turn) -> bool:
        """Take in the next turn; True when it is neither a leading system turn nor a pinned turn
        (it goes to the recent turns, and on to pages).

        System turns before any other turn are the prompt's fixed front. A system turn after the
        conversation began (a client's mid-conversation instruction or reminder), and a turn
        marked to stay as it came (`AS_SENT`) or as a person's words (`WORDS`), stay text in
        place: they go through the recent turns like any other, and where their neighbours go
        onto a page, the page shows one line where they were and their text follows it (`inline`)."""
        if turn.id != len(self.tokens):
            raise StoreError(f"the store returned turn {turn.id} after turn {self.last_id}: ids must follow "
                             "one another; the store is damaged or not an optictx store")
        n = text_tokens(turn, self.tokenizer)
        self.tokens.append(n)
        self.text_total += n
        if sizes := image_sizes(turn):
            self.images[turn.id] = sizes
        if turn.role == "system" and len(self.system) == turn.id:  # no other turn before it
            self.system.append(turn)
            return False
        if turn.pinned:
            self.pinned.append(turn)
            return False
        if turn.role == "system" or AS_SENT in turn.metadata or WORDS in turn.metadata:
            self.inline.append(turn)
            self.inline_ids.add(turn.id)  # type: ignore[arg-type]
        return True

    def inline_before(self, first: int) -> tuple[Turn, ...]:
        """The turns that stay text in place with ids below `first` (those on pages)."""
        return tuple(t for t in self.inline if t.id < first)  # type: ignore[operator]

    def of(self, turns: Iterable[Turn]) -> tuple[dict[int, int], dict[int, Sizes]]:
        """The native tokens and the image sizes of `turns`, by id."""
        ids = [t.id for t in turns]
        return {i: self.tokens[i] for i in ids}, {i: self.images[i] for i in ids if i in self.images}  # type: ignore[index]

    def all_images(self) -> tuple[tuple[int, int] | None, ...]:
        return tuple(s for sizes in self.images.values() for s in sizes)

    def original_tokens(self, cost: CostModel) -> int:
        """What the whole conversation costs sent as it came, under `cost`."""
        return self.text_total + sum(images_cost(sizes, cost) for sizes in self.images.values())
