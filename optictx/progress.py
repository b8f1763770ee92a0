"""Progress on the commands that run longer than a few seconds (`demo`, `render`, `fidelity`,
`niah`, `tune`, `train-reader`, `bill`): one helper. A bar on stderr when stderr is a terminal
and tqdm is installed (the eval extra); nothing otherwise, so logs, pipes and tests stay clean."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class Bar:
    """A bar of `total` steps (None: unknown); `update(n)` as work is done, then `close()` (or use
    it as a context manager)."""

    def __init__(self, total: int | None, desc: str, unit: str = "item", *, show: bool | None = None) -> None:
        self._bar: Any = None
        if show if show is not None else sys.stderr.isatty():
            try:
                from tqdm import tqdm
            except ImportError:
                return
            self._bar = tqdm(total=total, desc=desc, unit=unit, leave=False, file=sys.stderr)

    def update(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Bar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def each(items: Iterable[T], desc: str, unit: str = "item", *, total: int | None = None,
         show: bool | None = None) -> Iterator[T]:
    """`items`, one by one, with a bar while they are worked through."""
    size = total if total is not None else (len(items) if hasattr(items, "__len__") else None)  # type: ignore[arg-type]
    with Bar(size, desc, unit, show=show) as bar:
        for item in items:
            yield item
            bar.update()
