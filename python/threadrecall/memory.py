"""``Memory``: threads, messages and recall for AI agents, over DuckDB and the Rust core."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, TypeVar

from . import _core
from .config import MemoryConfig, merge
from .errors import (
    ConfigurationError,
    InvalidArgumentError,
    ResourceMismatchError,
    ThreadNotFoundError,
)
from .extractors import Extractor
from .hybrid import ranked_scores
from .recall import (
    HistoryQuery,
    Include,
    check_paging,
    check_thread_id,
    parse_includes,
    read_history,
)
from .semantic import MessageIndex
from .storage.duckdb import DuckDBStorage, new_id
from .summarize import (
    SummarizeResult,
    asummarize_conversation,
    load_messages_for_summary,
    summarize_conversation,
)
from .titles import Titler
from .types import ROLES, Message, MessageContent, RecallResult, Thread, ThreadPage, parse_time
from .working_memory import WorkingMemory, strip_working_memory

__all__ = ["Memory", "async_twin", "incoming_message"]

RESOURCE_SCOPE_WITHOUT_RESOURCE = (
    "Memory error: Resource-scoped semantic recall is enabled but no resourceId was provided. "
    "Either provide a resourceId or explicitly set semanticRecall.scope to 'thread'."
)

F = TypeVar("F", bound=Callable[..., Any])

logger = logging.getLogger("threadrecall")


# Set while an ``atransaction()`` is open in the current task: its calls then run on the task's
# own thread, which holds the transaction, instead of in a worker thread.
_IN_TRANSACTION: contextvars.ContextVar[bool] = contextvars.ContextVar("threadrecall_tx", default=False)


def async_twin(method: F) -> F:
    """The async twin of a blocking method: the same call, run in a worker thread (or, inside
    ``atransaction()``, on the thread that holds the transaction)."""

    @functools.wraps(method)
    async def twin(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _IN_TRANSACTION.get():
            return method(self, *args, **kwargs)
        return await asyncio.to_thread(method, self, *args, **kwargs)

    twin.__name__ = twin.__qualname__ = "a" + method.__name__
    return twin  # type: ignore[return-value]


class Memory:
    """Conversation memory: save messages of threads, recall them by page, filter or similarity.

    >>> memory = Memory()
    >>> thread = memory.create_thread("user-1", thread_id="t1")
    >>> _ = memory.save_messages([{"thread_id": "t1", "role": "user", "content": "Hello"}])
    >>> [m.text for m in memory.recall("t1").messages]
    ['Hello']
    """

    def __init__(self, storage: DuckDBStorage | None = None, vector: Any = None, embedder: Any = None,
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

    def close(self) -> None:
        """Finish background work, save the vector index file and close the database."""
        self.settle()
        if self.vector is not None and hasattr(self.vector, "close"):
            self.vector.close()
        self.storage.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def transaction(self) -> Any:
        """A context in which the calls made inside commit together or not at all.

        >>> memory = Memory()
        >>> with memory.transaction():
        ...     _ = memory.create_thread("user-1", thread_id="t1")
        ...     _ = memory.save_messages([{"thread_id": "t1", "role": "user", "content": "Hi"}])
        >>> memory.recall("t1").total
        1
        """
        return self.storage.transaction()

    @contextlib.asynccontextmanager
    async def atransaction(self) -> AsyncIterator[None]:
        """The async twin of ``transaction``: ``async with memory.atransaction(): ...``."""
        token = _IN_TRANSACTION.set(True)
        try:
            with self.transaction():
                yield
        finally:
            _IN_TRANSACTION.reset(token)

    @property
    def _embeds(self) -> bool:
        """Whether saved messages are embedded (semantic recall is on)."""
        return self.index is not None and self.options.semantic is not None

    # ----------------------------------------------------------------------------- threads

    def create_thread(self, resource_id: str, *, thread_id: str | None = None, title: str | None = None,
                      metadata: Mapping[str, Any] | None = None) -> Thread:
        """Create a thread, or replace the one with this id (its ``created_at`` is kept)."""
        _check_id(resource_id, "resource_id")
        if thread_id is not None:
            check_thread_id(thread_id)
        return self.storage.save_thread(Thread(
            id=thread_id or new_id(), resource_id=resource_id, title=title or "",
            metadata=_mapping(metadata, "metadata"),
        ))

    def get_thread_by_id(self, thread_id: str, *, resource_id: str | None = None) -> Thread | None:
        """The thread, or None when it does not exist or ``resource_id`` does not own it."""
        thread = self.storage.get_thread(check_thread_id(thread_id))
        if thread is None or (resource_id is not None and thread.resource_id != resource_id):
            return None
        return thread

    def list_threads(self, *, resource_id: str | None = None, metadata: Mapping[str, Any] | None = None,
                     page: int = 0, per_page: int | bool = 100,
                     order_by: Mapping[str, str] | None = None) -> ThreadPage:
        """Threads, newest first by default, optionally of one resource and matching metadata."""
        return self.storage.list_threads(
            resource_id=resource_id, metadata=metadata, page=page, per_page=per_page, order_by=order_by,
        )

    def update_thread(self, thread_id: str, *, title: str | None = None,
                      metadata: Mapping[str, Any] | None = None) -> Thread:
        """Change the title and shallow-merge metadata; raises ThreadNotFoundError if missing."""
        return self.storage.update_thread(
            check_thread_id(thread_id), title=title, metadata=_mapping(metadata, "metadata"),
        )

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread with its messages (a missing thread is not an error)."""
        check_thread_id(thread_id)
        with self.storage.transaction():
            gone = self.storage.thread_messages(thread_id) if self.index is not None else []
            self.storage.delete_thread(thread_id)
            if gone:
                self.index.remove(gone)

    # ----------------------------------------------------------------------------- messages

    def save_messages(self, messages: Iterable[Message | Mapping[str, Any]], *,
                      keep_system: bool = False) -> list[Message]:
        """Upsert messages by id; ids and times are filled in when absent; returns what was stored.

        System messages are not stored by default (they are instructions, not conversation):
        each one left out is logged as a warning on the ``threadrecall`` logger and is absent
        from the returned list. ``keep_system=True`` stores them like any other message, for
        callers whose system or developer messages are part of the history. Working-memory
        data (``<working_memory>`` tags, ``updateWorkingMemory`` tool calls) is never stored.
        A message whose thread does not exist creates it when the message names its
        ``resource_id``.

        >>> memory = Memory()
        >>> _ = memory.create_thread("user-1", thread_id="t1")
        >>> saved = memory.save_messages([{"thread_id": "t1", "role": "system", "content": "Be brief"},
        ...                               {"thread_id": "t1", "role": "user", "content": "Hi"}],
        ...                              keep_system=True)
        >>> [m.role for m in saved]
        ['system', 'user']
        """
        given = [incoming_message(m) for m in _sequence(messages, "messages")]
        if not keep_system and any(m.role == "system" for m in given):
            dropped = [m.id for m in given if m.role == "system"]
            logger.warning("save_messages: %d system message(s) not stored (pass keep_system=True "
                           "to store them): %s", len(dropped), ", ".join(dropped))
            given = [m for m in given if m.role != "system"]
        latest = {m.id: m for m in given}
        incoming = [m for m in map(strip_working_memory, latest.values()) if m is not None]
        embedded = self.index.prepare(incoming) if self._embeds else None
        with self.storage.transaction():
            threads = self._ensure_threads(incoming)
            incoming = [
                m if m.resource_id is not None else replace(m, resource_id=threads[m.thread_id].resource_id)
                for m in incoming
            ]
            replaced = self._stored(m.id for m in incoming)
            stored = self.storage.save_messages(incoming)
            if embedded is not None:
                self.index.write(embedded, {m.id: m for m in stored}, threads, replaced)
        if self._titler is not None:
            self._titler.schedule(self.storage, [t for t in threads.values() if not t.title])
        return stored

    def settle(self, timeout: float | None = None) -> None:
        """Wait for background work (thread titles) started by earlier calls."""
        if self._titler is not None:
            self._titler.settle(timeout)

    def update_messages(self, messages: Iterable[Mapping[str, Any] | Message]) -> list[Message]:
        """Partial updates by id: content fields replaced, metadata merged one level deep.

        Unknown ids are skipped. Moving a message to another thread is allowed.
        """
        updates = [_update_of(m) for m in _sequence(messages, "messages")]
        with self.storage.transaction():
            changed, moved, before = [], [], []
            for patch in updates:
                current = self.storage.get_message(patch["id"])
                if current is None:
                    continue
                new = _apply_update(current, patch)
                changed.append(new)
                if (new.search_text, new.thread_id, new.role, new.metadata) != (
                        current.search_text, current.thread_id, current.role, current.metadata):
                    moved.append(new)
                    before.append(current)
            threads = self._ensure_threads(changed)
            stored = self.storage.save_messages(changed)
            if self._embeds and moved:
                self.index.write(self.index.prepare(moved), {m.id: m for m in stored}, threads, before)
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
            _check_id(item, "message id")
        if resource_id is not None:
            _check_id(resource_id, "resource_id")
        found = self._stored(dict.fromkeys(wanted))
        if resource_id is None:
            return found
        threads = self.storage.get_threads({m.thread_id for m in found if m.resource_id is None})
        return [m for m in found
                if (m.resource_id or getattr(threads.get(m.thread_id), "resource_id", None)) == resource_id]

    def delete_messages(self, ids: Iterable[str | Mapping[str, Any]]) -> None:
        """Delete messages by id (or ``{"id": ...}`` entries); unknown ids are ignored."""
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
            flat.append(item)
        with self.storage.transaction():
            gone = self._stored(flat) if self.index is not None else []
            self.storage.delete_messages(flat)
            if gone:
                self.index.remove(gone)

    # ----------------------------------------------------------------------------- recall

    def recall(self, thread_id: str, *, resource_id: str | None = None,
               vector_search_string: str | None = None, per_page: int | bool | None = None,
               page: int = 0, include: Sequence[Mapping[str, Any]] | None = None,
               filter: Mapping[str, Any] | None = None, order_by: Mapping[str, str] | None = None,
               thread_config: MemoryConfig | Mapping[str, Any] | None = None,
               after_id: str | None = None, before_id: str | None = None) -> RecallResult:
        """A thread's messages: the newest ``last_messages`` by default, oldest first.

        ``per_page=False`` returns all of them; ``page`` counts from 0; ``filter`` takes a
        ``date_range`` and a shallow ``metadata`` match; ``include`` brings given messages with
        neighbours; ``after_id``/``before_id`` page by cursor.
        """
        config = merge(self.options, thread_config)
        check_thread_id(thread_id)
        check_paging(page, per_page)
        date_range, metadata = _split_filter(filter)
        semantic = config.semantic
        search = semantic is not None and bool(vector_search_string)
        if search and semantic.mode != "lexical" and self.index is None:
            raise ConfigurationError("Semantic recall requires an embedder to be configured.")
        if search and semantic.scope == "resource" and not resource_id:
            raise ConfigurationError(RESOURCE_SCOPE_WITHOUT_RESOURCE)
        includes = parse_includes(include, default_context=2 if search else 0)
        history_off = config.last_messages is False or config.last_messages == 0
        if history_off and per_page is None and not search and not includes:
            return RecallResult([], 0, page, 0, False)
        if resource_id:
            self._check_owner(thread_id, resource_id,
                              resource_scope=semantic is not None and semantic.scope == "resource")
        scores: dict[str, float] = {}
        if search:
            scores = self._semantic_scores(vector_search_string, semantic, thread_id, resource_id)
            before, after = semantic.range()
            includes += [Include(i, before, after) for i in scores]
        effective = per_page if per_page is not None else (0 if history_off else config.last_messages)
        query = HistoryQuery(
            thread_id=thread_id, resource_id=resource_id, per_page=effective, page=page,
            date_range=date_range, metadata=metadata, order_by=order_by,
            after_id=after_id, before_id=before_id,
        )
        result = read_history(self.storage, query, includes)
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
        """Summarise a thread's newest messages (within ``last_messages`` and
        ``max_input_tokens``) with ``model``; extracted values go to the result and the
        extractors' hooks. Nothing is stored."""
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
        """The async twin of ``summarize_thread``."""
        messages = await asyncio.to_thread(
            load_messages_for_summary, self.recall, check_thread_id(thread_id),
            resource_id=resource_id, last_messages=last_messages,
            max_input_tokens=max_input_tokens, abort_signal=abort_signal)
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
        """The stored working memory (None when empty)."""
        return self.working_memory.get(thread_id, resource_id=resource_id)

    def update_working_memory(self, thread_id: str, working_memory: str, *,
                              resource_id: str | None = None) -> None:
        """Replace the working memory."""
        self.working_memory.update(thread_id, working_memory, resource_id=resource_id)

    def merge_working_memory(self, thread_id: str, patch: Mapping[str, Any], *,
                             resource_id: str | None = None) -> dict[str, Any]:
        """Deep-merge ``patch`` into schema-mode working memory, atomically; returns the result."""
        return self.working_memory.merge(thread_id, patch, resource_id=resource_id)

    def get_working_memory_template(self) -> dict[str, str] | None:
        """``{"format": "markdown"|"json", "content": ...}``, or None when disabled."""
        return self.working_memory.template()

    # ----------------------------------------------------------------------------- internals

    def _stored(self, ids: Iterable[str]) -> list[Message]:
        """The stored versions of the messages with these ids (unknown ids skipped)."""
        return [m for i in ids if (m := self.storage.get_message(i)) is not None]

    def _semantic_scores(self, query: str, semantic: Any, thread_id: str,
                         resource_id: str | None) -> dict[str, float]:
        """The best matches for ``query`` (by ``semantic.mode``) with their scores, best first."""
        scope = {"resource_id": resource_id} if semantic.scope == "resource" else {"thread_id": thread_id}
        return ranked_scores(semantic, self.storage, self.index, query, scope)

    def _check_owner(self, thread_id: str, resource_id: str, *, resource_scope: bool) -> None:
        thread = self.storage.get_thread(thread_id)
        if thread is None:
            if not resource_scope:
                raise ThreadNotFoundError(f"No thread found with id {thread_id}")
            return
        if thread.resource_id != resource_id:
            raise ResourceMismatchError(
                f"Thread with id {thread_id} is for resource with id {thread.resource_id} "
                f"but resource {resource_id} was queried."
            )

    def _ensure_threads(self, messages: Sequence[Message]) -> dict[str, Thread]:
        """The thread of every message, created when missing and the message names a resource."""
        threads = self.storage.get_threads(m.thread_id for m in messages)
        missing: dict[str, Thread] = {}
        for m in messages:
            if m.thread_id in threads or m.thread_id in missing:
                continue
            if m.resource_id is None:
                raise ThreadNotFoundError(
                    f"Thread with id {m.thread_id} not found; create it first or give the "
                    "message a resource_id"
                )
            missing[m.thread_id] = Thread(id=m.thread_id, resource_id=m.resource_id)
        threads.update(self.storage.create_threads(list(missing.values())))
        return threads

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
    aget_working_memory = async_twin(get_working_memory)
    aupdate_working_memory = async_twin(update_working_memory)
    amerge_working_memory = async_twin(merge_working_memory)
    aget_working_memory_template = async_twin(get_working_memory_template)


def incoming_message(value: Message | Mapping[str, Any], *, thread_id: str | None = None,
                     resource_id: str | None = None) -> Message:
    """Validate a message given as a Message or a dict; fill in id, time, thread and resource.

    ``thread_id`` and ``resource_id`` are defaults for a dict that does not name its own.
    """
    if isinstance(value, Message):
        data = value.to_dict()
        data["content"] = value.content
    elif isinstance(value, Mapping):
        data = {"thread_id": thread_id, "resource_id": resource_id, **value}
    else:
        raise InvalidArgumentError(f"a message must be a Message or a dict, got {type(value).__name__}")
    thread = check_thread_id(data.get("thread_id"))
    role = data.get("role")
    if role not in ROLES:
        raise InvalidArgumentError(f"message role must be one of {', '.join(ROLES)}, got {role!r}")
    mid = data.get("id") or new_id()
    _check_id(mid, "message id")
    resource = data.get("resource_id")
    if resource is not None:
        _check_id(resource, "resource_id")
    try:
        content = MessageContent.coerce(data.get("content"))
        created_at = parse_time(data.get("created_at")) or datetime.now(timezone.utc)
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"message {mid}: {exc}") from None
    return Message(
        id=mid, thread_id=thread, resource_id=resource, role=role, content=content,
        created_at=created_at, type=data.get("type") or "text",
        metadata=_mapping(data.get("metadata"), "message metadata"),
    )


def _split_filter(filter: Any) -> tuple[Mapping[str, Any] | None, dict[str, Any] | None]:
    """``(date_range, metadata)`` of a recall filter; the metadata filter is validated here."""
    if filter is None:
        return None, None
    if not isinstance(filter, Mapping):
        raise InvalidArgumentError("filter must be a mapping with 'date_range' and/or 'metadata'")
    unknown = set(filter) - {"date_range", "metadata"}
    if unknown:
        raise InvalidArgumentError(f"unknown filter key(s): {', '.join(sorted(unknown))}")
    if "metadata" not in filter:
        return filter.get("date_range"), None
    _core.validate_metadata_filter(filter["metadata"])
    return filter.get("date_range"), dict(filter["metadata"]) or None


def _update_of(value: Mapping[str, Any] | Message) -> dict[str, Any]:
    data = value.to_dict() if isinstance(value, Message) else dict(value)
    if not isinstance(data.get("id"), str) or not data["id"].strip():
        raise InvalidArgumentError("All message IDs must be non-empty strings")
    allowed = {"id", "thread_id", "resource_id", "role", "content", "type", "metadata", "created_at"}
    unknown = set(data) - allowed
    if unknown:
        raise InvalidArgumentError(f"unknown message field(s): {', '.join(sorted(unknown))}")
    return data


def _apply_update(current: Message, patch: Mapping[str, Any]) -> Message:
    fields: dict[str, Any] = {}
    if "content" in patch:
        new = patch["content"]
        if isinstance(new, Mapping):
            old = current.content
            parts = new.get("parts", old.parts)
            text = new.get("text", old.text)
            fields["content"] = MessageContent.coerce({"parts": parts or (), "text": text})
        else:
            fields["content"] = MessageContent.coerce(new)
    if "metadata" in patch:
        fields["metadata"] = {**current.metadata, **_mapping(patch["metadata"], "message metadata")}
    for key in ("thread_id", "resource_id", "role", "type"):
        if patch.get(key) is not None:
            fields[key] = patch[key]
    if fields.get("role", current.role) not in ROLES:
        raise InvalidArgumentError(f"message role must be one of {', '.join(ROLES)}")
    if "thread_id" in fields:
        check_thread_id(fields["thread_id"])
    return replace(current, **fields)


def _sequence(value: Any, what: str) -> list[Any]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidArgumentError(f"{what} must be a list")
    return list(value)


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"{what} must be a dict, got {type(value).__name__}")
    return dict(value)


def _check_id(value: Any, what: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"{what} must be a non-empty string")
