"""A queue read by async iterators: items pushed before the reader asks are kept; fail() ends the
iteration with an error after what was pushed before it."""
from __future__ import annotations

import asyncio
from collections import deque
from typing import AsyncIterator, Generic, TypeVar

T = TypeVar("T")


class Channel(Generic[T]):
    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._ended = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    @property
    def ended(self) -> bool:
        return self._ended

    def push(self, item: T) -> None:
        if self._ended:
            return
        self._items.append(item)
        self._wake()

    def end(self) -> None:
        self._finish(None)

    def fail(self, error: BaseException) -> None:
        self._finish(error)

    def _finish(self, error: BaseException | None) -> None:
        if self._ended:
            return
        self._ended = True
        self._error = error
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        self._waiter = None

    def __aiter__(self) -> AsyncIterator[T]:
        return self

    async def __anext__(self) -> T:
        while True:
            if self._items:
                return self._items.popleft()
            if self._ended:
                if self._error is not None:
                    raise self._error
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
