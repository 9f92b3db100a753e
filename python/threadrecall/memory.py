"""``Memory``: threads, messages and recall for AI agents, over DuckDB and the Rust core."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from . import _core
from .config import MemoryConfig, merge
from .errors import (
    ConfigurationError,
    InvalidArgumentError,
    ResourceMismatchError,
    ThreadNotFoundError,
)
from .extractors import Extractor
from .hybrid import read_ranked
from .incoming import (
    apply_update,
    check_id,
    incoming_message,
    json_mapping,
    sequence,
    title_of,
    update_of,
)
from .recall import (
    HistoryQuery,
    Include,
    check_paging,
    check_thread_id,
    parse_includes,
    read_history,
    thread_rows,
)
from .semantic import MessageIndex
from .storage.base import AsyncStorage, Storage
from .storage.duckdb import DuckDBStorage
from .storage.rows import MessageRow, new_id
from .storage.thread_owners import ensure_threads
from .storage.thread_rows import ThreadRows
from .summarize import (
    SummarizeResult,
    asummarize_conversation,
    load_messages_for_summary,
    summarize_conversation,
)
from .titles import Titler
from .types import (
    Message,
    RecallResult,
    Thread,
    ThreadPage,
    check_name,
    check_text,
    check_texts,
)
from .working_memory import WorkingMemory, strip_working_memory
from .write_gate import WriteGate, gated_write

__all__ = ["Memory", "async_twin", "incoming_message"]  # incoming_message: re-exported

RESOURCE_SCOPE_WITHOUT_RESOURCE = (
    "Memory error: Resource-scoped semantic recall is enabled but no resourceId was provided. "
    "Either provide a resourceId or explicitly set semanticRecall.scope to 'thread'."
)

S = TypeVar("S")
P = ParamSpec("P")
R = TypeVar("R")

logger = logging.getLogger("threadrecall")


# Set while an ``atransaction()`` is open in the current task: its calls then run on the task's
# own thread, which holds the transaction, instead of in a worker thread.
_IN_TRANSACTION: contextvars.ContextVar[bool] = contextvars.ContextVar("threadrecall_tx", default=False)


def async_twin(method: Callable[Concatenate[S, P], R]) -> Callable[Concatenate[S, P], Coroutine[Any, Any, R]]:
    """The async twin of a blocking method: the same call, with its database round trips
    awaited on the running loop where the storage can (``run_async``: PostgreSQL), else run
    in a worker thread (or, inside ``atransaction()``, on the thread that holds the
    transaction). It takes the same parameters and is typed as a coroutine of the same
    result."""

    @functools.wraps(method)
    async def twin(self: Any, *args: P.args, **kwargs: P.kwargs) -> R:
        awaited = getattr(self, "_awaited", None)  # a processor has none: it runs in a thread
        storage = awaited(kwargs) if awaited is not None else None
        if storage is not None:
            return await storage.run_async(method, self, *args, **kwargs)
        if _IN_TRANSACTION.get():
            return method(self, *args, **kwargs)
        return await asyncio.to_thread(method, self, *args, **kwargs)

    twin.__name__ = "a" + method.__name__
    twin.__qualname__ = method.__qualname__.rsplit(".", 1)[0] + ".a" + method.__name__
    twin.__doc__ = f"The async twin of ``{method.__name__}``: the same parameters, awaited."
    return twin


class Memory:
    """Conversation memory: save messages of threads, recall them by page, filter or similarity.

    Args:
        storage: where threads, messages and resources live; ``None`` is
            ``DuckDBStorage(":memory:")``.
        vector: the vector store of semantic recall; ``None`` is an ``HnswVectorStore`` in
            the same database (when an ``embedder`` is given).
        embedder: what embeds message text for semantic recall (``HashEmbedder``,
            ``LocalEmbedder``, ``OpenAIEmbedder`` or any object with ``model_id``,
            ``dimension``, ``embed``); required when ``options`` turn semantic recall on.
        options: a ``MemoryConfig`` or a dict of its fields (``last_messages``,
            ``semantic_recall``, ``working_memory``, ``generate_title``).

    >>> memory = Memory()
    >>> thread = memory.create_thread("user-1", thread_id="t1")
    >>> _ = memory.save_messages([{"thread_id": "t1", "role": "user", "content": "Hello"}])
    >>> [m.text for m in memory.recall("t1").messages]
    ['Hello']
        """

    def __init__(self, storage: Storage | None = None, vector: Any = None, embedder: Any = None,
                 options: MemoryConfig | Mapping[str, Any] | None = None) -> None:
        self.storage = storage if storage is not None else DuckDBStorage(":memory:")
        self.options = MemoryConfig.coerce(options)
        semantic = self.options.semantic
        if semantic is not None and semantic.mode != "lexical" and embedder is None:
            raise ConfigurationError("Semantic recall requires an embedder to be configured.")
        if embedder is not None and vector is None:
            from .vector import HnswVectorStore

            vector = HnswVectorStore(self.storage)
        self.vector = vector
        self.embedder = embedder
        self.index = None if embedder is None else MessageIndex(
            vector, embedder, index_name=semantic.index_name if semantic else None)
        self._titler = Titler.from_config(self.options.generate_title)
        self._gate = WriteGate()
        # Whole-thread reads of the adapters, caught up from an in-process change feed.
        self._thread_reads = ThreadRows(self.storage) if hasattr(self.storage, "feed_position") else None

    def close(self) -> None:
        """Finish background work, save the vector index file and close the database.

        >>> memory = Memory()
        >>> memory.close()
        """
        self.settle()
        if self.vector is not None and hasattr(self.vector, "close"):
            self.vector.close()
        self.storage.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self, *, lock: str | None = None) -> Iterator[Any]:
        """A context in which the calls made inside commit together or not at all.

        ``lock`` names a key: transactions taking the same key run one after another, in any
        process (on PostgreSQL; DuckDB serialises every write transaction anyway), so a read
        inside followed by a write is an atomic read-modify-write.

        >>> memory = Memory()
        >>> with memory.transaction():
        ...     _ = memory.create_thread("user-1", thread_id="t1")
        ...     _ = memory.save_messages([{"thread_id": "t1", "role": "user", "content": "Hi"}])
        >>> with memory.transaction(lock="t1"):
        ...     if memory.recall("t1").total == 1:
        ...         _ = memory.save_messages([{"thread_id": "t1", "role": "user", "content": "Again"}])
        >>> memory.recall("t1").total
        2
        """
        with self._gate.holding_transaction(), self.storage.transaction(lock=lock) as tx:
            yield tx

    @contextlib.asynccontextmanager
    async def atransaction(self, *, lock: str | None = None) -> AsyncIterator[None]:
        """The async twin of ``transaction``: ``async with memory.atransaction(lock=None): ...``.

        >>> import asyncio
        >>> memory = Memory()
        >>> async def turn():
        ...     async with memory.atransaction():
        ...         await memory.asave_messages([{"thread_id": "t1", "resource_id": "u", "role": "user",
        ...                                       "content": "Hi"}])
        >>> asyncio.run(turn())
        >>> memory.recall("t1").total
        1
        """
        storage = self._awaited({})
        if storage is not None:
            async with storage.atransaction(lock=lock):
                yield
            return
        token = _IN_TRANSACTION.set(True)
        try:
            with self.transaction(lock=lock):
                yield
        finally:
            _IN_TRANSACTION.reset(token)

    def _awaited(self, kwargs: Mapping[str, Any]) -> AsyncStorage | None:
        """The storage whose own async calls an async twin awaits, or None: a storage that has
        them, with no vector store and no semantic or lexical recall configured (embedders,
        vector stores and the BM25 index block, so such a memory, or a call turning search on
        through ``thread_config``, runs in a worker thread)."""
        awaits = (hasattr(self.storage, "run_async") and self.index is None
                  and self.options.semantic is None
                  and not (kwargs.get("thread_config") is not None and kwargs.get("vector_search_string")))
        return cast(AsyncStorage, self.storage) if awaits else None

    @property
    def _embedding(self) -> MessageIndex | None:
        """The index saved messages are embedded into, or None (semantic recall is off)."""
        return self.index if self.options.semantic is not None else None

    # ----------------------------------------------------------------------------- threads

    @gated_write
    def create_thread(self, resource_id: str, *, thread_id: str | None = None, title: str | None = None,
                      metadata: Mapping[str, Any] | None = None) -> Thread:
        """Create a thread, or replace the one with this id (its ``created_at`` is kept).

        Args:
            resource_id: the owner (a user, an account...).
            thread_id: the id; a new uuid when ``None``. A thread of another resource with
                this id raises ``ResourceMismatchError`` and is left as it was.
            title: the title (``""`` when ``None``).
            metadata: a JSON dict; a value JSON cannot hold raises ``UnsupportedValueError``.

        >>> memory = Memory()
        >>> memory.create_thread("user-1", thread_id="t1", title="Trip", metadata={"lang": "en"}).title
        'Trip'
        >>> memory.create_thread("user-2", thread_id="t1")
        Traceback (most recent call last):
        ...
        threadrecall.errors.ResourceMismatchError: Thread with id t1 is for resource with id user-1 but resource user-2 tried to create it.
        """  # noqa: E501
        check_id(resource_id, "resource_id")
        if thread_id is not None:
            check_thread_id(thread_id)
        thread = Thread(id=thread_id or new_id(), resource_id=resource_id,
                        title=title_of(title) or "", metadata=json_mapping(metadata, "metadata"))
        with self.storage.transaction():
            if thread_id is not None:
                existing = self.storage.get_thread(thread_id)
                if existing is not None and existing.resource_id != resource_id:
                    raise ResourceMismatchError(
                        f"Thread with id {thread_id} is for resource with id {existing.resource_id} "
                        f"but resource {resource_id} tried to create it."
                    )
            stored = self.storage.save_thread(thread)
            if thread_id is not None and existing is not None and existing.metadata != stored.metadata:
                self._retag(stored)
            return stored

    def get_thread_by_id(self, thread_id: str, *, resource_id: str | None = None) -> Thread | None:
        """The thread, or None when it does not exist or ``resource_id`` does not own it.

        Args:
            thread_id: the thread's id.
            resource_id: when given, a thread of another resource is not returned.

        >>> memory = Memory()
        >>> _ = memory.create_thread("user-1", thread_id="t1")
        >>> memory.get_thread_by_id("t1").resource_id
        'user-1'
        >>> memory.get_thread_by_id("t1", resource_id="user-2") is None
        True
        """
        thread = self.storage.get_thread(check_thread_id(thread_id))
        if thread is None or (resource_id is not None and thread.resource_id != resource_id):
            return None
        return thread

    def list_threads(self, *, resource_id: str | None = None, metadata: Mapping[str, Any] | None = None,
                     page: int = 0, per_page: int | bool = 100,
                     order_by: Mapping[str, str] | None = None) -> ThreadPage:
        """Threads, newest first by default, optionally of one resource and matching metadata.

        Args:
            resource_id: only the threads of this resource.
            metadata: only threads whose metadata has these values (shallow equality).
            page: the page, counted from 0.
            per_page: threads per page, or ``False`` for all of them.
            order_by: ``{"field": "created_at" | "updated_at", "direction": "ASC" | "DESC"}``.

        >>> memory = Memory()
        >>> for i in range(3):
        ...     _ = memory.create_thread("user-1", thread_id=f"t{i}", metadata={"even": i % 2 == 0})
        >>> result = memory.list_threads(resource_id="user-1", metadata={"even": True},
        ...                              per_page=1, order_by={"field": "created_at", "direction": "ASC"})
        >>> [t.id for t in result.threads], result.total, result.has_more
        (['t0'], 2, True)
        >>> [t.id for t in memory.list_threads(per_page=1, page=1).threads]
        ['t1']
        """
        check_paging(page, per_page)
        check_texts(metadata, "the metadata filter")
        check_texts(order_by, "order_by")
        _check_optional(resource_id, "resource_id")
        return self.storage.list_threads(
            resource_id=resource_id, metadata=metadata, page=page, per_page=per_page, order_by=order_by,
        )

    @gated_write
    def update_thread(self, thread_id: str, *, title: str | None = None,
                      metadata: Mapping[str, Any] | None = None) -> Thread:
        """Change the title and shallow-merge metadata; raises ThreadNotFoundError if missing.

        Args:
            thread_id: the thread to change.
            title: the new title (kept when ``None``).
            metadata: keys to set (merged one level deep into the thread's metadata).

        >>> memory = Memory()
        >>> _ = memory.create_thread("user-1", thread_id="t1", metadata={"a": 1})
        >>> memory.update_thread("t1", title="Renamed", metadata={"b": 2}).metadata
        {'a': 1, 'b': 2}
        """
        check_thread_id(thread_id)
        changes = json_mapping(metadata, "metadata")
        with self.storage.transaction():
            thread = self.storage.update_thread(thread_id, title=title_of(title), metadata=changes)
            if changes:
                self._retag(thread)
        return thread

    @gated_write
    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread with its messages and their vectors (a missing thread is not an error).

        Args:
            thread_id: the thread to delete.

        >>> memory = Memory()
        >>> _ = memory.create_thread("user-1", thread_id="t1")
        >>> memory.delete_thread("t1")
        >>> memory.get_thread_by_id("t1") is None
        True
        """
        check_thread_id(thread_id)
        index = self.index
        with self.storage.transaction():
            gone = self.storage.thread_messages(thread_id) if index is not None else []
            self.storage.delete_thread(thread_id)
            if index is not None and gone:
                index.remove(gone)

    # ----------------------------------------------------------------------------- messages

    @gated_write
    def save_messages(self, messages: Iterable[Message | Mapping[str, Any]], *,
                      keep_system: bool = False) -> list[Message]:
        """Upsert messages by id; ids and times are filled in when absent; returns what was stored.

        System messages are not stored by default (they are instructions, not conversation):
        each one left out is logged as a warning on the ``threadrecall`` logger and is absent
        from the returned list. ``keep_system=True`` stores them like any other message, for
        callers whose system or developer messages are part of the history. Working-memory
        data (``<working_memory>`` tags, ``updateWorkingMemory`` tool calls) is never stored.
        A message whose thread does not exist creates it when the message names its
        ``resource_id``. Every message is checked before anything is written: a call that
        raises has stored nothing.

        Args:
            messages: ``Message`` objects or dicts with the keys of ``Message.to_dict()``
                (``content`` may be a ``str``); embedded when semantic recall is on.
            keep_system: store system messages too (by default each one is left out and
                logged as a warning on the ``threadrecall`` logger).

        >>> memory = Memory()
        >>> saved = memory.save_messages([
        ...     {"thread_id": "t1", "resource_id": "user-1", "role": "user", "content": "Hi"},
        ...     {"thread_id": "t1", "role": "assistant", "content": "Hello!", "metadata": {"n": 2}}])
        >>> [(m.role, m.text, m.resource_id) for m in saved]
        [('user', 'Hi', 'user-1'), ('assistant', 'Hello!', 'user-1')]
        >>> saved = memory.save_messages([{"thread_id": "t1", "role": "system", "content": "Be brief"}],
        ...                              keep_system=True)
        >>> [m.role for m in saved]
        ['system']
        >>> memory.save_messages([{"thread_id": "t1", "role": "user", "content": "x", "metadata": {"b": b"x"}}])
        Traceback (most recent call last):
        ...
        threadrecall.errors.UnsupportedValueError: a message without an id: metadata key 'b' holds a value of type bytes, which JSON cannot store
        """  # noqa: E501
        given = [incoming_message(m) for m in sequence(messages, "messages")]
        if not keep_system and any(m.role == "system" for m in given):
            dropped = [m.id for m in given if m.role == "system"]
            logger.warning("save_messages: %d system message(s) not stored (pass keep_system=True "
                           "to store them): %s", len(dropped), ", ".join(dropped))
            given = [m for m in given if m.role != "system"]
        latest = {m.id: m for m in given}
        incoming = [m for m in map(strip_working_memory, latest.values()) if m is not None]
        index = self._embedding
        embedded = index.prepare(incoming) if index is not None else None
        if index is None or embedded is None:  # one statement where the backend can: no transaction of its own
            stored, threads = self.storage.save_turn(incoming)
        else:
            with self.storage.transaction():
                replaced = self._stored(m.id for m in incoming)  # they name the vectors to drop
                stored, threads = self.storage.save_turn(incoming)
                index.write(embedded, {m.id: m for m in stored}, threads, replaced)
        if self._titler is not None:
            self._titler.schedule(self.storage, [t for t in threads.values() if not t.title])
        return stored

    def settle(self, timeout: float | None = None) -> None:
        """Wait for background work (thread titles) started by earlier calls.

        Args:
            timeout: the most seconds to wait (``None``: until it is done).

        >>> Memory().settle(timeout=1.0)
        """
        if self._titler is not None:
            self._titler.settle(timeout)

    @gated_write
    def update_messages(self, messages: Iterable[Mapping[str, Any] | Message]) -> list[Message]:
        """Partial updates by id: content fields replaced, metadata merged one level deep.

        Unknown ids are skipped. Moving a message to another thread is allowed. Changed text
        is embedded again when semantic recall is on.

        Args:
            messages: dicts (or ``Message`` objects) with an ``id`` and the fields to change:
                ``content``, ``metadata``, ``role``, ``type``, ``thread_id``, ``resource_id``.

        >>> memory = Memory()
        >>> _ = memory.save_messages([{"id": "m1", "thread_id": "t1", "resource_id": "u", "role": "user",
        ...                            "content": "Hi", "metadata": {"a": 1}}])
        >>> [(m.text, m.metadata) for m in memory.update_messages([
        ...     {"id": "m1", "content": "Hello", "metadata": {"b": 2}}, {"id": "unknown"}])]
        [('Hello', {'a': 1, 'b': 2})]
        """
        updates = [update_of(m) for m in sequence(messages, "messages")]
        with self.storage.transaction():
            changed, moved, before, retagged = [], [], [], []
            for patch in updates:
                current = self.storage.get_message(patch["id"])
                if current is None:
                    continue
                new = apply_update(current, patch)
                changed.append(new)
                if (new.search_text, new.thread_id, new.role) != (
                        current.search_text, current.thread_id, current.role):
                    moved.append(new)  # embedded again
                    before.append(current)
                elif (new.metadata, new.resource_id) != (current.metadata, current.resource_id):
                    retagged.append(new.id)  # the same vectors, new metadata
            threads = self._ensure_threads(changed)
            stored = self.storage.save_messages(changed)
            index = self._embedding
            if index is not None and moved:
                index.write(index.prepare(moved), {m.id: m for m in stored}, threads, before)
            if index is not None and retagged:
                wanted = set(retagged)
                index.retag([m for m in stored if m.id in wanted], threads)
            return stored

    def get_messages(self, ids: Iterable[str], *, resource_id: str | None = None) -> list[Message]:
        """The messages with these ids, in the order given; unknown ids are skipped, and so is
        a repeated id after its first place.

        With ``resource_id``, a message of another resource is skipped too, as if it did not
        exist (as ``get_thread_by_id`` does for threads): no error tells one caller that
        another resource's message exists.

        >>> memory = Memory()
        >>> _ = memory.create_thread("user-1", thread_id="t1")
        >>> a, b = memory.save_messages([{"thread_id": "t1", "role": "user", "content": c, "id": i}
        ...                              for i, c in [("a", "Hi"), ("b", "Bye")]])
        >>> [m.text for m in memory.get_messages(["b", "nope", "a"])]
        ['Bye', 'Hi']
        >>> memory.get_messages(["a"], resource_id="user-2")
        []
        """
        if isinstance(ids, (str, bytes, Mapping)) or not isinstance(ids, Iterable):
            raise InvalidArgumentError("ids must be a list of message ids")
        wanted = list(ids)
        for item in wanted:
            check_id(item, "message id")
        if resource_id is not None:
            check_id(resource_id, "resource_id")
        found = self._stored(dict.fromkeys(wanted))
        if resource_id is None:
            return found
        threads = self.storage.get_threads({m.thread_id for m in found if m.resource_id is None})
        return [m for m in found
                if (m.resource_id or getattr(threads.get(m.thread_id), "resource_id", None)) == resource_id]

    @gated_write
    def delete_messages(self, ids: Iterable[str | Mapping[str, Any]]) -> None:
        """Delete messages by id (or ``{"id": ...}`` entries); unknown ids are ignored.

        Args:
            ids: message ids, or dicts with an ``id``.

        >>> memory = Memory()
        >>> _ = memory.save_messages([{"id": "m1", "thread_id": "t1", "resource_id": "u", "role": "user",
        ...                            "content": "Hi"}])
        >>> memory.delete_messages(["m1", {"id": "unknown"}])
        >>> memory.recall("t1").total
        0
        """
        if isinstance(ids, (str, bytes, Mapping)) or not isinstance(ids, Iterable):
            raise InvalidArgumentError("Invalid input: must be an array of message IDs or message objects")
        flat = []
        for item in ids:
            if isinstance(item, Mapping) and "id" in item:
                item = item["id"]
            elif not isinstance(item, str):
                raise InvalidArgumentError(
                    "Invalid input: array items must be strings or objects with an id property"
                )
            if not isinstance(item, str) or not item.strip():
                raise InvalidArgumentError("All message IDs must be non-empty strings")
            flat.append(check_name(item, "message id"))
        index = self.index
        with self.storage.transaction():
            gone = self._stored(flat) if index is not None else []
            self.storage.delete_messages(flat)
            if index is not None and gone:
                index.remove(gone)

    # ----------------------------------------------------------------------------- recall

    def recall(self, thread_id: str, *, resource_id: str | None = None,
               vector_search_string: str | None = None, per_page: int | bool | None = None,
               page: int = 0, include: Sequence[Mapping[str, Any]] | None = None,
               filter: Mapping[str, Any] | None = None, order_by: Mapping[str, str] | None = None,
               thread_config: MemoryConfig | Mapping[str, Any] | None = None,
               after_id: str | None = None, before_id: str | None = None) -> RecallResult:
        """A thread's messages: the newest ``last_messages`` by default, oldest first.

        Args:
            thread_id: the thread to read.
            resource_id: when given, the thread must belong to it (``ResourceMismatchError``
                otherwise); resource-scoped semantic recall searches this resource's threads.
            vector_search_string: the text semantic recall searches for (when the config turns
                it on); the hits come with ``message_range`` neighbours.
            per_page: messages per page; ``False`` for all; ``None`` for ``last_messages``.
            page: the page, counted from 0 (page 0 holds the newest messages).
            include: ``[{"id", "thread_id"?, "with_previous_messages"?, "with_next_messages"?}]``:
                messages brought in with neighbours from their own thread, exempt from filters.
            filter: ``{"date_range": {"start", "end", "start_exclusive", "end_exclusive"},
                "metadata": {key: scalar}}``.
            order_by: ``{"field": "created_at", "direction": "ASC" | "DESC"}``.
            thread_config: a ``MemoryConfig`` or dict deep-merged over the options for this call.
            after_id: page by cursor: the ``per_page`` messages right after this message.
            before_id: page by cursor: the ``per_page`` messages right before this message.

        >>> memory = Memory(options={"last_messages": 3})
        >>> _ = memory.save_messages([{"id": f"m{i}", "thread_id": "t1", "resource_id": "u", "role": "user",
        ...     "content": f"message {i}", "created_at": 1700000000 + i, "metadata": {"even": i % 2 == 0}}
        ...     for i in range(6)])
        >>> [m.id for m in memory.recall("t1", resource_id="u").messages]
        ['m3', 'm4', 'm5']
        >>> [m.id for m in memory.recall("t1", per_page=2, page=1).messages]
        ['m2', 'm3']
        >>> [m.id for m in memory.recall("t1", per_page=False, filter={"metadata": {"even": True}}).messages]
        ['m0', 'm2', 'm4']
        >>> [m.id for m in memory.recall("t1", per_page=0, include=[
        ...     {"id": "m1", "with_previous_messages": 1, "with_next_messages": 0}]).messages]
        ['m0', 'm1']
        >>> [m.id for m in memory.recall("t1", per_page=False, order_by={"field": "created_at", "direction": "DESC"},
        ...                              filter={"date_range": {"start": 1700000004}}).messages]
        ['m4', 'm5']
        >>> [m.id for m in memory.recall("t1", per_page=2, after_id="m1").messages]
        ['m2', 'm3']
        >>> [m.id for m in memory.recall("t1", per_page=2, before_id="m1").messages]
        ['m0']
        >>> memory.recall("t1", thread_config={"last_messages": 1}).messages[0].id
        'm5'
        >>> from threadrecall.embedders import HashEmbedder
        >>> semantic = Memory(embedder=HashEmbedder(dim=64), options={
        ...     "last_messages": False, "semantic_recall": {"top_k": 1, "message_range": 0, "scope": "thread"}})
        >>> _ = semantic.save_messages([{"thread_id": "t1", "resource_id": "u", "role": "user", "content": c}
        ...                             for c in ("the weather is sunny", "my dog is called Rex")])
        >>> [m.text for m in semantic.recall("t1", vector_search_string="dog called Rex").messages]
        ['my dog is called Rex']
        """
        self._gate.wait_for_writes()
        config = merge(self.options, thread_config)
        check_thread_id(thread_id)
        check_paging(page, per_page)
        for name, value in (("resource_id", resource_id), ("after_id", after_id), ("before_id", before_id)):
            _check_optional(value, name)
        _check_optional(vector_search_string, "vector_search_string", check_text)
        date_range, metadata = _split_filter(filter)
        semantic = config.semantic
        search = semantic if vector_search_string else None  # the semantic recall to run, if any
        if search is not None and search.mode != "lexical" and self.index is None:
            raise ConfigurationError("Semantic recall requires an embedder to be configured.")
        if search is not None and search.scope == "resource" and not resource_id:
            raise ConfigurationError(RESOURCE_SCOPE_WITHOUT_RESOURCE)
        check_texts(include, "include")
        check_texts(order_by, "order_by")
        includes = parse_includes(include, default_context=2 if search is not None else 0)
        history_off = config.last_messages is False or config.last_messages == 0
        if history_off and per_page is None and search is None and not includes:
            return RecallResult([], 0, page, 0, False)
        resource_scope = semantic is not None and semantic.scope == "resource"
        effective = per_page if per_page is not None else (0 if history_off else config.last_messages)
        query = HistoryQuery(
            thread_id=thread_id, resource_id=resource_id, per_page=effective, page=page,
            date_range=date_range, metadata=metadata, order_by=order_by,
            after_id=after_id, before_id=before_id,
        )
        # The owner is checked with the first read of the history (in the same statement
        # where the storage can), before anything of it is returned.
        check = functools.partial(_owner_is, thread_id, resource_id, resource_scope) if resource_id else None
        if search is None or not vector_search_string:
            return read_history(self.storage, query, includes, check)
        before, after = search.range()
        scope = {"resource_id": resource_id} if search.scope == "resource" and resource_id else {"thread_id": thread_id}

        def read(found: dict[str, float], freshness: Any) -> RecallResult:
            hits = [Include(i, before, after) for i in found]
            return read_history(self.storage, query, includes + hits, check, freshness)

        scores, result = read_ranked(search, self.storage, self.index, vector_search_string, scope, read)
        if not scores:
            return result
        shown = {m.id for m in result.messages}
        return replace(result, scores={i: s for i, s in scores.items() if i in shown})

    # ----------------------------------------------------------------------------- summaries

    def summarize_thread(self, thread_id: str, model: Any, *, resource_id: str | None = None,
                         last_messages: int | None = None, max_input_tokens: int = 1_000_000,
                         instructions: str | None = None,
                         extract: Sequence[Extractor] | None = None, request_context: Any = None,
                         abort_signal: Any = None) -> SummarizeResult:
        """Summarise a thread's newest messages with ``model``; nothing is stored.

        Args:
            thread_id: the thread to summarise.
            model: a ``LanguageModel`` or a router string ``"provider/model"``.
            resource_id: when given, the thread must belong to it.
            last_messages: summarise at most this many of the newest messages.
            max_input_tokens: drop the oldest messages beyond this estimated token count.
            instructions: extra instructions for the model.
            extract: ``Extractor``s whose values are pulled from the summary.
            request_context: passed to the extractors' hooks.
            abort_signal: anything with ``is_set()``; set, it stops the call (``AbortedError``).

        >>> from threadrecall.models import ScriptedModel
        >>> memory = Memory()
        >>> _ = memory.save_messages([{"thread_id": "t1", "resource_id": "u", "role": "user",
        ...                            "content": "Book a table for two at 8pm"}])
        >>> model = ScriptedModel(["<observations>\\n* (20:00) A table for two.\\n</observations>"])
        >>> memory.summarize_thread("t1", model, resource_id="u", last_messages=10, max_input_tokens=1000,
        ...                         instructions="Be brief.", extract=[], request_context={},
        ...                         abort_signal=None).summary
        '* (20:00) A table for two.'
        """
        messages = load_messages_for_summary(
            self.recall, check_thread_id(thread_id), resource_id=resource_id,
            last_messages=last_messages, max_input_tokens=max_input_tokens,
            abort_signal=abort_signal)
        return summarize_conversation(
            messages, model, instructions=instructions, extract=extract, thread_id=thread_id,
            resource_id=resource_id, request_context=request_context, abort_signal=abort_signal,
            memory=self)

    async def asummarize_thread(self, thread_id: str, model: Any, *,
                                resource_id: str | None = None, last_messages: int | None = None,
                                max_input_tokens: int = 1_000_000, instructions: str | None = None,
                                extract: Sequence[Extractor] | None = None,
                                request_context: Any = None,
                                abort_signal: Any = None) -> SummarizeResult:
        """The async twin of ``summarize_thread``, with the same parameters.

        >>> import asyncio
        >>> from threadrecall.models import ScriptedModel
        >>> memory = Memory()
        >>> _ = memory.save_messages([{"thread_id": "t1", "resource_id": "u", "role": "user", "content": "Hi"}])
        >>> model = ScriptedModel(["<observations>\\n* A greeting.\\n</observations>"])
        >>> asyncio.run(memory.asummarize_thread("t1", model)).summary
        '* A greeting.'
        """
        load = functools.partial(
            load_messages_for_summary, self.recall, check_thread_id(thread_id),
            resource_id=resource_id, last_messages=last_messages,
            max_input_tokens=max_input_tokens, abort_signal=abort_signal)
        storage = self._awaited({})
        messages = await (storage.run_async(load) if storage is not None else asyncio.to_thread(load))
        return await asummarize_conversation(
            messages, model, instructions=instructions, extract=extract, thread_id=thread_id,
            resource_id=resource_id, request_context=request_context, abort_signal=abort_signal,
            memory=self)

    # ----------------------------------------------------------------------------- working memory

    @functools.cached_property
    def working_memory(self) -> WorkingMemory:
        """The working memory of this instance (its config is ``options.working_memory``)."""
        return WorkingMemory(self.storage, self.options.working_memory)

    def get_working_memory(self, thread_id: str, *, resource_id: str | None = None) -> str | None:
        """The stored working memory (None when empty).

        Args:
            thread_id: the thread (its own memory in thread scope).
            resource_id: the resource (whose memory it is in resource scope, the default).

        >>> memory = Memory(options={"working_memory": {"enabled": True}})
        >>> _ = memory.create_thread("u", thread_id="t1")
        >>> memory.update_working_memory("t1", "# Name: Ada", resource_id="u")
        >>> memory.get_working_memory("t1", resource_id="u")
        '# Name: Ada'
        """
        return self.working_memory.get(thread_id, resource_id=resource_id)

    def update_working_memory(self, thread_id: str, working_memory: str, *,
                              resource_id: str | None = None) -> None:
        """Replace the working memory.

        Args:
            thread_id: the thread (its own memory in thread scope).
            working_memory: the new text.
            resource_id: the resource (whose memory it is in resource scope, the default).

        >>> memory = Memory(options={"working_memory": {"enabled": True, "scope": "thread"}})
        >>> _ = memory.create_thread("u", thread_id="t1")
        >>> memory.update_working_memory("t1", "likes tea")
        >>> memory.get_working_memory("t1")
        'likes tea'
        """
        self.working_memory.update(thread_id, working_memory, resource_id=resource_id)

    def merge_working_memory(self, thread_id: str, patch: Mapping[str, Any], *,
                             resource_id: str | None = None) -> dict[str, Any]:
        """Deep-merge ``patch`` into schema-mode working memory, atomically; returns the result.

        Args:
            thread_id: the thread (its own memory in thread scope).
            patch: a JSON dict (or its text); ``None`` deletes a key, lists replace.
            resource_id: the resource (whose memory it is in resource scope, the default).

        >>> memory = Memory(options={"working_memory": {"enabled": True, "schema": {
        ...     "type": "object", "properties": {"name": {"type": "string"}, "city": {"type": "string"}}}}})
        >>> _ = memory.create_thread("u", thread_id="t1")
        >>> memory.merge_working_memory("t1", {"name": "Ada", "city": "Paris"}, resource_id="u")
        {'name': 'Ada', 'city': 'Paris'}
        >>> memory.merge_working_memory("t1", {"city": None}, resource_id="u")
        {'name': 'Ada'}
        """
        return self.working_memory.merge(thread_id, patch, resource_id=resource_id)

    def get_working_memory_template(self) -> dict[str, str] | None:
        """``{"format": "markdown"|"json", "content": ...}``, or None when disabled.

        >>> Memory().get_working_memory_template() is None
        True
        >>> Memory(options={"working_memory": {"enabled": True}}).get_working_memory_template()["format"]
        'markdown'
        """
        return self.working_memory.template()

    # ----------------------------------------------------------------------------- internals

    def _retag(self, thread: Thread) -> None:
        """Carry a thread's new metadata to its messages' vectors (in the open transaction)."""
        index = self._embedding
        if index is not None:
            index.retag(self.storage.thread_messages(thread.id), {thread.id: thread})

    def _thread_rows(self, thread_id: str, resource_id: str | None = None,
                     metadata: Mapping[str, Any] | None = None) -> list[MessageRow]:
        """The rows ``recall(thread_id, resource_id=..., per_page=False, filter={"metadata":
        metadata})`` decodes, with the same checks and errors; for the framework adapters,
        which decode only the rows that changed since their previous read."""
        self._gate.wait_for_writes()
        check_thread_id(thread_id)
        _check_optional(resource_id, "resource_id")
        _, metadata = _split_filter({"metadata": metadata} if metadata else None)
        check = functools.partial(_owner_is, thread_id, resource_id, False) if resource_id else None
        if self._thread_reads is None or metadata:
            return thread_rows(self.storage, thread_id, check, resource_id=resource_id, metadata=metadata)
        if check is not None:
            thread = self.storage.get_thread(thread_id)
            check(None if thread is None else thread.resource_id)
        return self._thread_reads.read(thread_id, functools.partial(
            thread_rows, self.storage, thread_id, resource_id=resource_id), resource_id)

    def _stored(self, ids: Iterable[str]) -> list[Message]:
        """The stored versions of the messages with these ids (unknown ids skipped)."""
        return self.storage.get_messages(ids)

    def _ensure_threads(self, messages: Sequence[Message]) -> dict[str, Thread]:
        """The thread of every message, created when missing and the message names a resource."""
        return ensure_threads(self.storage, messages)

    acreate_thread = async_twin(create_thread)
    aget_thread_by_id = async_twin(get_thread_by_id)
    alist_threads = async_twin(list_threads)
    aupdate_thread = async_twin(update_thread)
    adelete_thread = async_twin(delete_thread)
    asave_messages = async_twin(save_messages)
    aupdate_messages = async_twin(update_messages)
    adelete_messages = async_twin(delete_messages)
    aget_messages = async_twin(get_messages)
    arecall = async_twin(recall)
    _athread_rows = async_twin(_thread_rows)
    aget_working_memory = async_twin(get_working_memory)
    aupdate_working_memory = async_twin(update_working_memory)
    amerge_working_memory = async_twin(merge_working_memory)
    aget_working_memory_template = async_twin(get_working_memory_template)


def _owner_is(thread_id: str, resource_id: str, resource_scope: bool, owner: str | None) -> None:
    """Refuse a recall of ``resource_id`` from a thread of another resource (``owner``; ``None``:
    no such thread, refused unless the recall searches the whole resource)."""
    if owner is None:
        if not resource_scope:
            raise ThreadNotFoundError(f"No thread found with id {thread_id}")
        return
    if owner != resource_id:
        raise ResourceMismatchError(
            f"Thread with id {thread_id} is for resource with id {owner} "
            f"but resource {resource_id} was queried."
        )


def _check_optional(value: Any, name: str, check: Callable[[str, str], str] = check_name) -> None:
    """``InvalidArgumentError`` unless ``value`` is ``None`` or a string ``check`` accepts."""
    if value is not None:
        if not isinstance(value, str):
            raise InvalidArgumentError(f"{name} must be a string, got {type(value).__name__}")
        check(value, name)


def _split_filter(filter: Any) -> tuple[Mapping[str, Any] | None, dict[str, Any] | None]:
    """``(date_range, metadata)`` of a recall filter; the metadata filter is validated here."""
    if filter is None:
        return None, None
    check_texts(filter, "filter")
    if not isinstance(filter, Mapping):
        raise InvalidArgumentError("filter must be a mapping with 'date_range' and/or 'metadata'")
    unknown = set(filter) - {"date_range", "metadata"}
    if unknown:
        raise InvalidArgumentError(f"unknown filter key(s): {', '.join(sorted(unknown))}")
    if "metadata" not in filter:
        return filter.get("date_range"), None
    _core.validate_metadata_filter(filter["metadata"])
    return filter.get("date_range"), dict(filter["metadata"]) or None
