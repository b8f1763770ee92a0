"""A session's requests parsed as they grow: request k's turns are request k-1's, less those of
the item the client rewrote, plus those the dialect reads in the rewritten and new items alone
(`Requests.to` says which). So `optictx bill` hands the proxy each request's new turns only
(`Proxy.grow`), in time proportional to them, where the wire would make it parse the whole
conversation again on every request.

What makes a request not the one before grown is found, and that request is read whole instead
(`Grower.next` gives None):
the first request, a head that changed, a rewritten item whose turns changed (the proxy forks
the conversation there), a turn before the conversation's first ones (Anthropic's system turn,
which a system message anywhere in the list makes), an item the dialect does not read alone.
The dialect reads a probe message placed before the items: where its turn lands is where the
items' turns start.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Any, overload

from ..serve.dialect import Dialect, Parsed, Unknown
from ..turnindex import AS_SENT
from ..turns import Turn

PROBE = "\0optictx: the items start here\0"
FRONT = 4  # turns a dialect reads before a request's items, at most (a system prompt, instructions)


class Grown(Sequence[Any]):
    """The first `n` items of a list that grows at its end: a request's turns, or what the
    client sent for each, shared with the requests before it, so that no request copies the
    conversation. The next request may rewrite what the client sent for the last turns (a cache
    mark moved): a view is read before then. A slice is a tuple of its own."""

    __slots__ = ("_items", "_n")

    def __init__(self, items: list[Any], n: int) -> None:
        self._items, self._n = items, n

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> Any: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[Any, ...]: ...

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            r = range(self._n)[i]
            return tuple(self._items[r.start : r.stop] if r.step == 1 else (self._items[j] for j in r))
        return self._items[range(self._n)[i]]  # the range says what is out of it

    def __iter__(self) -> Iterator[Any]:
        return islice(self._items, self._n)


class Grower:
    """The turns of a session's requests, each built from the one before (`next`), or read
    whole (`whole`), as the dialect reads them."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.last: Parsed | None = None  # the last request's
        self._turns: list[Turn] = []  # its turns, and what the client sent for each (`Grown`)
        self._originals: list[Any] = []
        self._front = 0  # its turns before its items'
        self._tail: int | None = None  # where its last item's turns start (None: not known)
        self._kept = -1  # its last turn kept as the client sent it (AS_SENT)

    def whole(self, parsed: Parsed, head: dict[str, Any], key: str, items: list[Any]) -> None:
        """A request read whole (`parsed`, from its bytes): what the next one grows from."""
        self.last, self._tail = None, None
        if parsed.passthrough is not None:
            return
        read = self._read(head, key, items)
        if read is None or len(read[1]) != len(parsed.turns) - read[0]:
            return
        self.last, self._front, self._kept = parsed, read[0], _last_kept(parsed.turns, len(parsed.turns))
        self._turns, self._originals = list(parsed.turns), list(parsed.originals)
        self._tail = self._last_item(head, key, items)

    def next(self, head: dict[str, Any], key: str, items: list[Any], first: int | None,
             mentions: frozenset[bytes]) -> Parsed | None:
        """The request whose items from `first` on are new or rewritten, built from the last one
        (`mentions`: what `MENTION` finds in its bytes), or None: read it whole."""
        last, tail = self.last, self._tail
        self.last, self._tail = None, None
        if last is None or tail is None or first is None:
            return None
        read = self._read(head, key, items[first:])
        if read is None or read[0] > self._front:  # a turn before the others: they all move
            return None
        turns, originals = read[1], read[2]
        rewritten = len(last.turns) - tail
        if turns[:rewritten] != last.turns[tail:]:  # the rewritten item says another thing
            return None
        # Its turns say what they said (its old ones stay); what the client sent for them may
        # differ (a cache mark moved): that is the last request's no longer.
        self._originals[tail : len(last.turns)] = originals[:rewritten]
        self._turns.extend(turns[rewritten:])
        self._originals.extend(originals[rewritten:])
        n = len(self._turns)
        grown = Grown(self._turns, n)
        kept = _last_kept(grown, n, stop=tail)
        if kept < 0:
            kept = self._kept if self._kept < tail else _last_kept(grown, tail)
        self.last, self._kept = Parsed.grown(head, grown, Grown(self._originals, n), mentions,  # type: ignore[arg-type]
                                             grown[kept].metadata[AS_SENT] if kept >= 0 else None), kept
        self._tail = self._last_item(head, key, items)
        return self.last

    def _read(self, head: dict[str, Any], key: str, items: list[Any]
              ) -> tuple[int, tuple[Turn, ...], tuple[Any, ...]] | None:
        """The dialect's turns of `items` after `head` (and their originals), and how many turns
        come before them; None where it does not read them so."""
        try:
            parsed = self.dialect.parse({**head, key: [{"role": "user", "content": PROBE}, *items]}, b"")
        except Unknown:
            return None
        at = [i for i, t in enumerate(parsed.turns[:FRONT]) if t.content == PROBE]
        if parsed.passthrough is not None or len(at) != 1:
            return None
        return at[0], parsed.turns[at[0] + 1 :], parsed.originals[at[0] + 1 :]

    def _last_item(self, head: dict[str, Any], key: str, items: list[Any]) -> int | None:
        """Where the last item's turns start in the last request's (None: it reads as no turn of
        its own, or as other turns than in the request: the next request is read whole)."""
        assert self.last is not None
        read = self._read(head, key, items[-1:]) if items else None
        if read is None or not read[1] or read[2] != self.last.originals[-len(read[1]) :]:
            return None  # what rode with it before it (a Responses reasoning item) is not in it alone
        return len(self.last.turns) - len(read[1])


def _last_kept(turns: Sequence[Turn], end: int, stop: int = 0) -> int:
    """The index of the last turn before `end`, from `stop`, kept as the client sent it, or -1."""
    return next((i for i in range(end - 1, stop - 1, -1) if AS_SENT in turns[i].metadata), -1)
