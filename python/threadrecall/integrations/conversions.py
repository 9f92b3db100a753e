"""``Conversions``: a framework's objects for stored messages, converted once per change.

A framework's message class (LangChain's, LlamaIndex's) costs tens of microseconds to build,
and a chat history is read whole on every turn. ``Conversions`` keeps the objects of the last
read by message id, and gives back the same object for a stored row equal to the one it was
built from: a turn decodes and builds only the messages it added or changed (comparing two
rows costs far less than decoding one's JSON, which is most of a read's cost otherwise). As
with the frameworks' in-memory stores, what a read returns is shared with the next read:
changes go through the store, not into the objects.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from ..storage.rows import MessageRow, messages_of
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
    >>> first = texts.of_rows(memory._thread_rows("t"), "t")
    >>> _ = memory.save_messages([{"thread_id": "t", "role": "assistant", "content": "Hello"}])
    >>> again = texts.of_rows(memory._thread_rows("t"), "t")
    >>> again, again[0] is first[0]
    ([['Hi'], ['Hello']], True)
    """

    def __init__(self, convert: Callable[[Message], T]) -> None:
        self.convert = convert
        self._kept: dict[str, tuple[list[MessageRow], list[T]]] = {}  # thread -> its last read

    def of_rows(self, rows: Sequence[MessageRow], thread_id: str = "") -> list[T]:
        """The objects of stored ``rows`` (a read of the thread ``thread_id``, in order): a row
        equal to one of the thread's previous read gives back that read's object, the others
        are decoded in one pass and converted. What is kept of the thread is this read.

        A read that begins with the previous read's very rows (the same tuples, as a read
        caught up from the change feed gives them: ``Memory._thread_rows``) converts only the
        rows after them, without comparing the others one by one."""
        rows = list(rows)
        last_rows, last_objects = self._kept.pop(thread_id, ([], []))
        n = len(last_rows)
        if n and len(rows) >= n and rows[n - 1] is last_rows[-1] and all(map(operator.is_, rows, last_rows)):
            objects = last_objects + self._converted(rows[n:])
        else:
            last = {row[0]: (row, obj) for row, obj in zip(last_rows, last_objects)}
            found: dict[str, T] = {}
            changed = []
            for row in rows:
                hit = last.get(row[0])
                if hit is not None and hit[0] == row:
                    found[row[0]] = hit[1]
                else:
                    changed.append(row)
            found.update(zip((r[0] for r in changed), self._converted(changed)))
            objects = [found[row[0]] for row in rows]
        self._kept[thread_id] = (rows, objects)
        while len(self._kept) > KEPT_THREADS:
            self._kept.pop(next(iter(self._kept)), None)
        return list(objects)

    def _converted(self, rows: Sequence[MessageRow]) -> list[T]:
        return [self.convert(m) for m in messages_of(rows)] if rows else []
