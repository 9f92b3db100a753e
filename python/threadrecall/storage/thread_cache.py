"""A bounded LRU of committed threads, so ownership checks and lookups skip the database.

Only committed state goes in: entries are replaced or dropped when a transaction that changes
them commits, and nothing read inside an open transaction is cached (it might roll back).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable

from ..types import Thread

__all__ = ["ThreadCache"]


class ThreadCache:
    def __init__(self, capacity: int = 65_536) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, Thread] = OrderedDict()
        self._lock = threading.Lock()

    def get_many(self, thread_ids: Iterable[str]) -> dict[str, Thread]:
        """The cached threads among ``thread_ids``, by id."""
        found = {}
        with self._lock:
            for thread_id in thread_ids:
                thread = self._items.get(thread_id)
                if thread is not None:
                    self._items.move_to_end(thread_id)
                    found[thread_id] = thread
        return found

    def put(self, threads: Iterable[Thread]) -> None:
        with self._lock:
            for thread in threads:
                self._items[thread.id] = thread
                self._items.move_to_end(thread.id)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def drop(self, thread_ids: Iterable[str]) -> None:
        with self._lock:
            for thread_id in thread_ids:
                self._items.pop(thread_id, None)
