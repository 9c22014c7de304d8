"""Response bodies that run a callback when they are closed: how slots are released.

A WSGI server calls ``close()`` on the body once it has sent it (PEP 3333),
even when sending failed; Django calls the ``close`` of a streaming response's
content from ``HttpResponse.close()``. Wrapping a body in these classes ties
the release of concurrency slots to the end of the response, streaming
included. The callback runs once, whatever happens.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from typing import Generic, TypeVar

__all__ = ["AsyncClosingIterator", "ClosingIterator"]

_T = TypeVar("_T")


class ClosingIterator(Generic[_T]):
    """Iterate ``iterable``; on ``close()``, close it too, then call ``on_close`` once."""

    def __init__(self, iterable: Iterable[_T], on_close: Callable[[], object]) -> None:
        self._iterable = iterable
        self._iterator: Iterator[_T] = iter(iterable)
        self._on_close: Callable[[], object] | None = on_close

    def __iter__(self) -> ClosingIterator[_T]:
        return self

    def __next__(self) -> _T:
        return next(self._iterator)

    def close(self) -> None:
        try:
            close = getattr(self._iterable, "close", None)
            if close is not None:
                close()
        finally:
            callback, self._on_close = self._on_close, None
            if callback is not None:
                callback()


class AsyncClosingIterator(Generic[_T]):
    """The same for an async iterable (Django's async streaming responses)."""

    def __init__(
        self, iterable: AsyncIterable[_T], on_close: Callable[[], object]
    ) -> None:
        self._iterator: AsyncIterator[_T] = aiter(iterable)
        self._on_close: Callable[[], object] | None = on_close

    def __aiter__(self) -> AsyncClosingIterator[_T]:
        return self

    async def __anext__(self) -> _T:
        return await anext(self._iterator)

    def close(self) -> None:
        callback, self._on_close = self._on_close, None
        if callback is not None:
            callback()
