"""The storage protocol: what ``Memory``, recall, the processors and working memory need of a
backend, and nothing more.

A backend stores threads, messages and resources, runs transactions, answers recall's reads
(a page of a thread, context windows around given messages) and publishes a change feed: the
message writes committed since a position, in commit order. In-memory structures built over a
backend (the replica in ``storage.replica``, vector index caches) follow that feed, so they can
be rebuilt from any backend and kept current with writes made by other processes.

Rules every backend follows:
- Each call is one transaction; inside ``transaction()`` every call joins the outermost one,
  its reads see its own writes, and nothing is visible to others until it commits.
- A call sees every write committed (by any process) before it began.
- Message order within a thread is ``(created_at, seq)``, ``seq`` being the insertion order; an
  upsert of an existing id keeps both.
- ``page`` and ``window`` follow the rules of ``_core.Timeline.page`` and ``Timeline.window``
  (the replica answers them with a Timeline; SQL backends give identical results).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from ..types import Message, Resource, Thread, ThreadPage
from .rows import MessageRow

if TYPE_CHECKING:
    from .replica import Replica

__all__ = ["AsyncStorage", "Changes", "Storage"]

T = TypeVar("T")


@dataclass(frozen=True)
class Changes:
    """The message writes committed after one feed position, up to ``position``.

    ``upserted`` rows are as stored at ``position``; ``deleted`` ids and ``deleted_threads``
    are gone. When ``reset`` is true the feed no longer reaches back to the position asked
    for: the consumer rebuilds from ``Storage.scan_messages()`` and continues from
    ``position``.
    """

    position: int
    upserted: list[MessageRow] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    deleted_threads: list[str] = field(default_factory=list)
    reset: bool = False

    def __bool__(self) -> bool:
        return bool(self.reset or self.upserted or self.deleted or self.deleted_threads)

    @classmethod
    def merged(cls, position: int, entries: Iterable[Changes]) -> Changes:
        """Consecutive stretches of a feed as one, applicable in the order deleted threads,
        deleted ids, upserts: a later write to an id overrides an earlier one.

        >>> row = ("m1", "t1", None, 0, 1, "{}")
        >>> Changes.merged(2, [Changes(1, upserted=[row]), Changes(2, deleted=["m1"])]).deleted
        ['m1']
        """
        upserted: dict[str, MessageRow] = {}
        deleted: dict[str, None] = {}
        threads: dict[str, None] = {}
        for entry in entries:
            for thread_id in entry.deleted_threads:
                threads[thread_id] = None
                for mid in [m for m, row in upserted.items() if row[1] == thread_id]:
                    del upserted[mid]
            for mid in entry.deleted:
                upserted.pop(mid, None)
                deleted[mid] = None
            for row in entry.upserted:
                deleted.pop(row[0], None)
                upserted[row[0]] = row
        return cls(position, list(upserted.values()), list(deleted), list(threads))


@runtime_checkable
class Storage(Protocol):
    """Threads, messages, resources and working memory in one backend."""

    def close(self) -> None: ...

    def transaction(self, *, lock: str | None = None) -> AbstractContextManager[Any]:
        """Calls inside commit together or not at all. ``lock`` names a key that serialises
        this transaction with every other one taking the same key, in any process (for
        read-modify-write cycles)."""
        ...

    def on_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the open transaction commits (at once when none is open)."""
        ...

    # threads
    def get_thread(self, thread_id: str) -> Thread | None: ...
    def get_threads(self, thread_ids: Iterable[str]) -> dict[str, Thread]: ...
    def save_thread(self, thread: Thread) -> Thread: ...
    def save_threads(self, threads: Sequence[Thread]) -> dict[str, Thread]: ...
    def create_threads(self, threads: Sequence[Thread]) -> dict[str, Thread]: ...
    def update_thread(self, thread_id: str, *, title: str | None = None,
                      metadata: Mapping[str, Any] | None = None) -> Thread: ...
    def delete_thread(self, thread_id: str) -> None: ...
    def list_threads(self, *, resource_id: str | None = None, metadata: Any = None, page: int = 0,
                     per_page: int | bool = 100,
                     order_by: Mapping[str, str] | None = None) -> ThreadPage: ...

    # resources (working memory of resource scope lives here)
    def get_resource(self, resource_id: str) -> Resource | None: ...
    def update_resource(self, resource_id: str, *, working_memory: str | None = None,
                        metadata: Mapping[str, Any] | None = None) -> Resource: ...

    # messages
    def get_message(self, message_id: str) -> Message | None: ...
    def get_messages(self, message_ids: Iterable[str]) -> list[Message]:
        """The stored messages among ``message_ids``, in the order asked (unknown ids skipped)."""
        ...
    def thread_messages(self, thread_id: str) -> list[Message]: ...
    def save_messages(self, messages: Sequence[Message]) -> list[Message]: ...
    def save_turn(self, messages: Sequence[Message]) -> tuple[list[Message], dict[str, Thread]]:
        """Save messages with their threads, all or nothing: a missing thread is created with
        the resource of its first message (``ThreadNotFoundError`` when that has none), a
        message without a resource takes its thread's. Returns the messages as stored and
        their threads by id (``storage.thread_owners.save_turn`` is the generic form)."""
        ...
    def delete_messages(self, ids: Iterable[str]) -> list[str]: ...

    # recall's reads
    def page(self, thread_id: str, *, resource_id: str | None = None, start: int | None = None,
             start_exclusive: bool = False, end: int | None = None, end_exclusive: bool = False,
             metadata: Mapping[str, Any] | None = None, descending: bool = False, offset: int = 0,
             limit: int | None = None, after_id: str | None = None,
             before_id: str | None = None) -> tuple[list[MessageRow], int]:
        """Rows of one thread and how many pass the filters (``Timeline.page``'s rules), in
        the order asked: newest first when ``descending``, else oldest first (recall relies
        on it and does not sort them again)."""
        ...

    def window(self, includes: Sequence[tuple[str, int, int]],
               resource_id: str | None = None) -> list[MessageRow]:
        """Each ``(id, before, after)`` message with its neighbours (``Timeline.window``)."""
        ...

    # change feed
    def changes_since(self, position: int) -> Changes:
        """The message writes committed after ``position`` (0: since the beginning)."""
        ...

    def scan_messages(self, batch: int = 50_000) -> Iterator[list[MessageRow]]:
        """Every stored message, in batches, in insertion order."""
        ...

    # the in-memory replica, which lexical and hybrid recall read
    @property
    def replica(self) -> Replica:
        """The replica, holding every write committed before the call."""
        ...

    def lexical(self) -> Any:
        """The replica's BM25 index (``_core.LexicalIndex``), built on first use."""
        ...


class AsyncStorage(Storage, Protocol):
    """A storage whose round trips can also be awaited on the running loop (PostgreSQL)."""

    async def run_async(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call ``fn(*args, **kwargs)`` with this storage's round trips awaited."""
        ...

    def atransaction(self, *, lock: str | None = None) -> AbstractAsyncContextManager[None]:
        """``transaction()`` for coroutines."""
        ...
