"""LRU: the one bounded cache type every optictx cache is built on (by entries, by bytes, or both)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

from .errors import ConfigError

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[K, V]):
    """A thread-safe map that forgets its least recently used entries past `max_items` entries or
    `max_bytes` bytes (each value's size from `size_of`). The newest entry is always kept, even
    when it alone is over `max_bytes`: a caller that just computed a value gets it back.

    >>> c = LRU(max_items=2); c["a"] = 1; c["b"] = 2; _ = c.get("a"); c["c"] = 3
    >>> sorted(c)
    ['a', 'c']
    """

    def __init__(self, *, max_items: int | None = None, max_bytes: int | None = None,
                 size_of: Callable[[V], int] | None = None) -> None:
        if max_items is None and max_bytes is None:
            raise ConfigError("an LRU needs max_items, max_bytes or both: an unbounded cache is a leak")
        if max_bytes is not None and size_of is None:
            raise ConfigError("max_bytes needs size_of, the size of a value in bytes")
        self.max_items, self.max_bytes, self._size_of = max_items, max_bytes, size_of
        self.bytes = 0
        self._d: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value (now the most recently used), or `default`."""
        with self._lock:
            hit = self._d.get(key)
            if hit is None:
                return default
            self._d.move_to_end(key)
            return hit[0]

    def __setitem__(self, key: K, value: V) -> None:
        size = self._size_of(value) if self._size_of is not None else 0
        with self._lock:
            old = self._d.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            self._d[key] = (value, size)
            self.bytes += size
            while len(self._d) > 1 and (
                    (self.max_items is not None and len(self._d) > self.max_items)
                    or (self.max_bytes is not None and self.bytes > self.max_bytes)):
                _, (_, s) = self._d.popitem(last=False)
                self.bytes -= s

    def pop(self, key: K) -> V | None:
        with self._lock:
            hit = self._d.pop(key, None)
            if hit is None:
                return None
            self.bytes -= hit[1]
            return hit[0]

    def clear(self) -> None:
        with self._lock:
            self._d.clear()
            self.bytes = 0

    def __contains__(self, key: object) -> bool:
        return key in self._d

    def __len__(self) -> int:
        return len(self._d)

    def __iter__(self) -> Iterator[K]:
        with self._lock:
            return iter(list(self._d))
