"""``Conversions``: a framework's objects for stored messages, converted once per change.

A framework's message class (LangChain's, LlamaIndex's) costs tens of microseconds to build,
and a chat history is read whole on every turn. ``Conversions`` keeps the objects of the last
read by message id, and gives back the same object for a stored message equal to the one it
was built from (a comparison costs a fraction of a build), so a turn builds only the messages
it added or changed. As with the frameworks' in-memory stores, what a read returns is shared
with the next read: changes go through the store, not into the objects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from ..types import Message

__all__ = ["Conversions"]

T = TypeVar("T")

# Threads whose last read is kept (the most recently read ones): a store serving many keys
# holds no more than these many threads' objects.
KEPT_THREADS = 16


class Conversions(Generic[T]):
    """The objects ``convert`` makes of stored messages, reused while a message is unchanged.

    >>> from threadrecall import Memory
    >>> memory = Memory()
    >>> _ = memory.save_messages([{"thread_id": "t", "resource_id": "r", "role": "user", "content": "Hi"}])
    >>> texts = Conversions(lambda m: [m.text])
    >>> first = texts.of(memory.recall("t").messages)
    >>> first, texts.of(memory.recall("t").messages)[0] is first[0]
    ([['Hi']], True)
    """

    def __init__(self, convert: Callable[[Message], T]) -> None:
        self.convert = convert
        self._kept: dict[str, dict[str, tuple[Message, T]]] = {}  # thread -> message id -> pair

    def of(self, messages: Sequence[Message], thread_id: str = "") -> list[T]:
        """The objects of ``messages`` (a read of the thread ``thread_id``), in order; what
        is kept of the thread is this read."""
        last = self._kept.pop(thread_id, {})
        now: dict[str, tuple[Message, T]] = {}
        out = []
        for message in messages:
            hit = last.get(message.id)
            if hit is None or hit[0] != message:
                hit = (message, self.convert(message))
            now[message.id] = hit
            out.append(hit[1])
        self._kept[thread_id] = now
        while len(self._kept) > KEPT_THREADS:
            self._kept.pop(next(iter(self._kept)), None)
        return out
