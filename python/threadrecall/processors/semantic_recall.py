"""``SemanticRecall``: similar past messages brought into a turn, and new messages indexed."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from ..config import SemanticRecallConfig
from ..hybrid import read_ranked
from ..incoming import incoming_message
from ..memory import async_twin
from ..recall import owned_window
from ..semantic import MessageIndex
from ..storage.base import Storage
from ..storage.rows import MessageRow, message_of
from ..types import Message, MessageContent

__all__ = ["SemanticRecall", "format_other_threads"]

_ROLE_ORDER = {"system": 0, "user": 1, "assistant": 2, "tool": 3}
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_HEADER = "The following messages were remembered from a different conversation:"


class SemanticRecall:
    """Recall similar messages on input; embed the turn's new messages on output.

    It shares its write path and vector index (``mastra_memory_<embedder model id>`` unless
    ``index_name`` is given) with ``Memory``, so either can write what the other reads.

    Args:
        storage: where messages and threads are read.
        vector: the vector store of the message index.
        embedder: what embeds the query and the new messages.
        top_k: how many similar messages to recall.
        message_range: neighbours of each hit: an int, or ``{"before": n, "after": m}``.
        scope: ``"resource"`` (every thread of the resource) or ``"thread"``.
        threshold: the lowest similarity kept (``None``: no limit).
        index_name: the vector index (default ``mastra_memory_<embedder model id>``).
        logger: where failures are logged (a failed recall never breaks the turn).
        mode: how hits are ranked: ``"vector"``, ``"lexical"`` (BM25) or ``"hybrid"``.
        lexical_weight: hybrid's weight of the BM25 ranking (``semantic_recall.lexical_weight``;
            ``None``: the default).

    >>> from threadrecall import Memory
    >>> from threadrecall.embedders import HashEmbedder
    >>> from threadrecall.storage import DuckDBStorage
    >>> from threadrecall.vector import HnswVectorStore
    >>> storage = DuckDBStorage()
    >>> recall = SemanticRecall(storage, HnswVectorStore(storage), HashEmbedder(dim=64), top_k=1,
    ...                         message_range=0, scope="thread")
    >>> saved = Memory(storage=storage).save_messages([{"thread_id": "t1", "resource_id": "u",
    ...     "role": "user", "content": c} for c in ("the weather is sunny", "my dog is called Rex")])
    >>> _ = recall.process_output_result(saved, thread_id="t1")
    >>> turn = [{"role": "user", "content": "dog called Rex?"}]
    >>> [m.text for m in recall.process_input(turn, thread_id="t1")]
    ['my dog is called Rex', 'dog called Rex?']
    """

    id = "semantic-recall"
    name = "SemanticRecall"

    def __init__(self, storage: Storage, vector: Any, embedder: Any, *, top_k: int = 4,
                 message_range: int | Mapping[str, int] = 1, scope: str = "resource",
                 threshold: float | None = None, index_name: str | None = None,
                 logger: logging.Logger | None = None, mode: str = "vector",
                 lexical_weight: float | None = None) -> None:
        self.config = SemanticRecallConfig(top_k=top_k, message_range=message_range, scope=scope,
                                           threshold=threshold, index_name=index_name, mode=mode,
                                           lexical_weight=lexical_weight)
        self.storage = storage
        self.index = MessageIndex(vector, embedder, index_name=index_name)
        self.logger = logger or logging.getLogger("threadrecall.semantic_recall")

    def process_input(self, messages: Sequence[Message | Mapping[str, Any]], *, thread_id: str | None,
                      resource_id: str | None = None) -> list[Message]:
        """``[other threads as one system message] + [same-thread hits] + messages``.

        Args:
            messages: the turn's input; its last user message is the query.
            thread_id: the current thread (``None``: the input is returned as it is).
            resource_id: the owner, whose threads resource scope searches.
        """
        if not thread_id:  # returned as given: dicts stay dicts
            return list(messages)  # type: ignore[arg-type]
        given = [incoming_message(m, thread_id=thread_id, resource_id=resource_id) for m in messages]
        query = _last_user_text(given)
        if not query:
            return given
        try:
            recalled = self._recall(query, thread_id, resource_id)
        except Exception:  # a failed recall must never break the turn
            self.logger.exception("semantic recall failed; continuing without recalled messages")
            return given
        present = {m.id for m in given}
        recalled = [m for m in recalled if m.id not in present]
        own = [_from_memory(m) for m in recalled if m.thread_id in (thread_id, None, "")]
        others = [m for m in recalled if m.thread_id not in (thread_id, None, "")]
        prefix: list[Message] = []
        if others and self.config.scope == "resource":
            prefix.append(_system(format_other_threads(others, thread_id), thread_id, resource_id))
        return prefix + own + given

    def process_output_result(self, messages: Sequence[Message | Mapping[str, Any]], *,
                              thread_id: str | None, resource_id: str | None = None) -> list[Message]:
        """Embed and index the new messages of the turn; returns them unchanged.

        Args:
            messages: the turn's messages (those recalled from memory are skipped).
            thread_id: their thread (``None``: nothing is indexed).
            resource_id: the owner, given to messages that name none.
        """
        if not thread_id:  # returned as given: dicts stay dicts
            return list(messages)  # type: ignore[arg-type]
        given = [incoming_message(m, thread_id=thread_id, resource_id=resource_id) for m in messages]
        fresh = [m for m in given if m.role != "system" and m.text.strip()
                 and (m.metadata or {}).get("source") != "memory"]
        if not fresh:
            return given
        try:
            embedded = self.index.prepare(fresh)
            thread = self.storage.get_thread(thread_id)
            threads = {thread_id: thread} if thread else {}
            with self.storage.transaction():
                stored = [old for m in fresh if (old := self.storage.get_message(m.id)) is not None]
                self.index.write(embedded, {m.id: m for m in fresh}, threads, stored)
        except Exception:
            self.logger.exception("indexing new messages failed; they will not be recalled semantically")
        return given

    def _recall(self, query: str, thread_id: str, resource_id: str | None) -> list[Message]:
        config = self.config
        scope = {"resource_id": resource_id} if config.scope == "resource" and resource_id else {"thread_id": thread_id}
        before, after = config.range()

        def read(scores: dict[str, float], freshness: Any) -> list[MessageRow]:
            wanted = [(i, before, after) for i in scores]
            if freshness is not None:  # checked in the read of the hits (see read_ranked)
                return owned_window(self.storage, thread_id, wanted, resource_id or None, freshness)[1]
            return self.storage.window(wanted, resource_id or None) if wanted else []

        _, rows = read_ranked(config, self.storage, self.index, query, scope, read)
        return [message_of(r) for r in rows]

    aprocess_input = async_twin(process_input)
    aprocess_output_result = async_twin(process_output_result)

def format_other_threads(messages: Sequence[Message], thread_id: str) -> str:
    """Other threads' messages as dated lines inside the remembered-conversation envelope."""
    ordered = sorted(messages, key=lambda m: (m.created_at, m.thread_id, _ROLE_ORDER.get(m.role, 9), m.id))
    lines: list[str] = []
    day = None
    for m in ordered:
        when = m.created_at.astimezone(timezone.utc)
        if when.date() != day:
            day = when.date()
            lines.append(f"the following messages are from {when.year}, {_MONTHS[when.month - 1]}, {when.day}")
        label = " from previous conversation" if m.thread_id != thread_id else ""
        lines.append(f"Message{label} at {_clock(when)}: {m.role.capitalize()}: {m.text}")
    body = "\n".join(lines)
    return f"{_HEADER}\n<remembered_from_other_conversation>\n{body}\n<end_remembered_from_other_conversation>"


def _clock(when: datetime) -> str:
    hour = when.hour % 12 or 12
    return f"{hour}:{when.minute:02d} {'AM' if when.hour < 12 else 'PM'}"


def _last_user_text(messages: Sequence[Message]) -> str:
    for m in reversed(messages):
        if m.role == "user":
            return m.text.strip()
    return ""


def _from_memory(message: Message) -> Message:
    return replace(message, metadata={**message.metadata, "source": "memory"})


def _system(text: str, thread_id: str, resource_id: str | None) -> Message:
    return Message(id=f"semantic-recall-{thread_id}", thread_id=thread_id, resource_id=resource_id,
                   role="system", content=MessageContent.coerce(text), created_at=datetime.now(timezone.utc))
