"""``ThreadRows``: the rows of the threads read whole most recently, kept current from the
storage's change feed.

The framework adapters read a chat history whole on every turn (a LangChain history's
``messages``, a LlamaIndex chat store's ``get_messages``). Instead of building every row of the
thread again from the replica and sorting them, a read asks the feed what committed since the
thread's previous read: new messages of the thread that sort after its last row are added at
the end, and anything else that touched the thread (a message changed, moved or deleted, the
thread deleted, a feed that no longer reaches back, an open transaction that has written
messages, which the feed does not hold yet) makes the read a whole one again. Unchanged rows
are the same tuples as the previous read's, so a caller comparing them with what it kept
(``Conversions``) finds them equal at once. A read in a transaction that has not written
messages yet sees the committed rows, as the replica's reads there do (LlamaIndex's async
stores read in one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from operator import itemgetter
from typing import Any

from .rows import MessageRow

__all__ = ["ThreadRows"]

# Threads whose rows are kept (the most recently read ones).
KEPT_THREADS = 16

_ORDER = itemgetter(3, 4)  # (created_at, seq): a thread's order


class ThreadRows:
    """Whole-thread reads of ``storage`` (one with an in-process change feed:
    ``feed_position`` and ``changes_since``), caught up from the feed.

    >>> from threadrecall import Memory
    >>> from threadrecall.storage import DuckDBStorage
    >>> from threadrecall.recall import thread_rows
    >>> storage = DuckDBStorage()
    >>> memory = Memory(storage=storage)
    >>> rows = ThreadRows(storage)
    >>> _ = memory.save_messages([{"id": "a", "thread_id": "t", "resource_id": "r", "role": "user", "content": "Hi"}])
    >>> first = rows.read("t", lambda: thread_rows(storage, "t"))
    >>> _ = memory.save_messages([{"id": "b", "thread_id": "t", "role": "assistant", "content": "Hello"}])
    >>> again = rows.read("t", lambda: [])  # caught up from the feed: the whole read is not needed
    >>> [r[0] for r in again], again[0] is first[0]
    (['a', 'b'], True)
    """

    def __init__(self, storage: Any) -> None:
        self.storage = storage
        # (thread, resource filter) -> (feed position, rows, rows by id)
        self._kept: dict[tuple[str, str | None], tuple[int, list[MessageRow], dict[str, MessageRow]]] = {}
        self._lock = threading.Lock()

    def read(self, thread_id: str, whole: Callable[[], list[MessageRow]],
             resource_id: str | None = None) -> list[MessageRow]:
        """The rows of ``thread_id`` (only those of ``resource_id`` when given), oldest
        first, as ``whole()`` reads them."""
        db = self.storage.db
        if db.in_transaction and db.scratch.get("messages_written"):  # its own rows: not in the feed
            return whole()
        key = (thread_id, resource_id)
        with self._lock:
            kept = self._kept.pop(key, None)
        current = self._caught_up(key, *kept) if kept is not None else None
        if current is None:
            position = self.storage.feed_position  # before the read: a commit after it comes again
            rows = whole()
            current = position, rows, {r[0]: r for r in rows}
        with self._lock:
            self._kept[key] = current
            while len(self._kept) > KEPT_THREADS:
                self._kept.pop(next(iter(self._kept)))
        return list(current[1])

    def _caught_up(self, key: tuple[str, str | None], position: int, rows: list[MessageRow],
                   by_id: dict[str, MessageRow]) -> tuple[int, list[MessageRow], dict[str, MessageRow]] | None:
        """The kept read brought up to the feed's head, or None when only a whole read can."""
        thread_id, resource_id = key
        changes = self.storage.changes_since(position)
        if not changes:
            return changes.position, rows, by_id
        if changes.reset or thread_id in changes.deleted_threads or not by_id.keys().isdisjoint(changes.deleted):
            return None
        new = []
        for row in changes.upserted:
            had = by_id.get(row[0])
            if had is not None:
                if had != row:  # changed, or moved to another thread
                    return None
            elif row[1] == thread_id and (resource_id is None or row[2] == resource_id):
                new.append(row)
        if not new:
            return changes.position, rows, by_id
        new.sort(key=_ORDER)
        if rows and _ORDER(new[0]) <= _ORDER(rows[-1]):  # not at the end: the order is the replica's
            return None
        by_id.update((r[0], r) for r in new)
        return changes.position, rows + new, by_id
