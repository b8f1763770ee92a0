"""The one bounded cache: never over its bounds (but for the newest entry), least recently used out first."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from optictx.lru import LRU


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 50)), max_size=200), st.integers(1, 8),
       st.integers(1, 120))
def test_bounds_hold_and_the_newest_entry_is_kept(ops, max_items, max_bytes):
    cache: LRU[int, int] = LRU(max_items=max_items, max_bytes=max_bytes, size_of=lambda v: v)
    model: dict[int, int] = {}  # what a plain LRU holds, in use order
    for key, value in ops:
        cache[key] = value
        model.pop(key, None)
        model[key] = value
        while len(model) > 1 and (len(model) > max_items or sum(model.values()) > max_bytes):
            del model[next(iter(model))]
        assert cache.get(key) == value  # the newest entry is there, even when alone over max_bytes
        model[key] = model.pop(key)  # get() made it the most recent: it already was
        assert list(cache) == list(model)
        assert cache.bytes == sum(model.values())


def test_get_refreshes_and_pop_frees():
    cache: LRU[str, str] = LRU(max_items=2)
    cache["a"], cache["b"] = "1", "2"
    assert cache.get("a") == "1"
    cache["c"] = "3"
    assert sorted(cache) == ["a", "c"] and cache.get("b") is None
    assert cache.pop("a") == "1" and cache.pop("a") is None and len(cache) == 1


def test_an_unbounded_cache_is_refused():
    with pytest.raises(ValueError, match="unbounded"):
        LRU()
    with pytest.raises(ValueError, match="size_of"):
        LRU(max_bytes=10)
