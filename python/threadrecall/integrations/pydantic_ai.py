"""Pydantic AI's conversation store over threadrecall: ``pip install 'threadrecall[pydantic-ai]'``.

A conversation is a thread (id ``pydantic-ai:<conversation_id>``) owned by the resource named
by its scope (``"pydantic-ai"`` when it has none); its record (head, usage, deferred tool
requests, branches, revision, ...) is kept in the thread's metadata. Each entry is a message of
the thread of the conversation that stored it, under the entry's own id: its content holds the
model message as Pydantic AI serialises it, and its text (the user prompts and the model's
text) is what threadrecall recalls and searches. ``write_record`` compares the revision and
stores the record with its entries in one transaction, so a stale save raises
``ConversationConflict`` and writes nothing. ``delete_record`` removes the record and every
entry no remaining conversation reaches; a thread whose entries a fork still uses stays, holding
only those, until that fork goes too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai import messages as _messages
from pydantic_ai.conversation_store import (
    ConversationConflict,
    ConversationEntry,
    ConversationRecord,
    ConversationStore,
)

from ..memory import Memory
from ..types import Message, Thread

__all__ = ["ThreadRecallConversationStore"]

KIND = "pydantic-ai.conversation"
_PREFIX = "pydantic-ai:"
_RECORD = TypeAdapter(ConversationRecord)
_MESSAGES = _messages.ModelMessagesTypeAdapter


class ThreadRecallConversationStore(ConversationStore):
    """A Pydantic AI ``ConversationStore`` whose conversations live in a threadrecall ``Memory``.

    >>> import asyncio
    >>> from pydantic_ai import Agent
    >>> from pydantic_ai.conversation import Conversation
    >>> from pydantic_ai.models.test import TestModel
    >>> store = ThreadRecallConversationStore(Memory())
    >>> agent = Agent(TestModel(custom_output_text="Noted."))
    >>> async def turn(prompt):
    ...     conversation = await store.load("c1") or Conversation(conversation_id="c1")
    ...     result = await agent.run(prompt, conversation=conversation)
    ...     await store.save(result)
    ...     return result.output
    >>> asyncio.run(turn("My name is Ada")), asyncio.run(turn("What is my name?"))
    ('Noted.', 'Noted.')
    >>> len(asyncio.run(store.load("c1")).messages)
    4
    """

    def __init__(self, memory: Memory, *, resource_id: str = "pydantic-ai") -> None:
        self.memory = memory
        self.resource_id = resource_id

    # -- records

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        return await asyncio.to_thread(self._stored_record, conversation_id)

    def _stored_record(self, conversation_id: str) -> ConversationRecord | None:
        return _record_of(self.memory.get_thread_by_id(_thread_id(conversation_id)))

    async def read_records(self, *, scope: str | None = None,
                           limit: int | None = None) -> Sequence[ConversationRecord]:
        return await asyncio.to_thread(self._stored_records, scope, limit)

    def _stored_records(self, scope: str | None, limit: int | None) -> list[ConversationRecord]:
        where: dict[str, Any] = {"kind": KIND, "live": True}
        if scope is not None:
            where["scope"] = scope
        threads = self.memory.list_threads(metadata=where, per_page=False).threads
        records = [r for r in map(_record_of, threads) if r is not None]
        records.sort(key=lambda r: r.updated_at, reverse=True)
        return records[:limit]

    async def write_record(self, record: ConversationRecord, *,
                           new_entries: Sequence[ConversationEntry] = (),
                           expected_revision: str | None) -> None:
        await asyncio.to_thread(self._cas_write, record, list(new_entries), expected_revision)

    def _cas_write(self, record: ConversationRecord, new_entries: list[ConversationEntry],
                      expected_revision: str | None) -> None:
        """Compare the stored revision and write the record with its entries, atomically."""
        cid = record.conversation_id
        with self.memory.transaction():
            thread = self.memory.get_thread_by_id(_thread_id(cid))
            stored = _record_of(thread)
            if (stored.revision if stored is not None else None) != expected_revision:
                raise ConversationConflict(cid)
            fresh = {e.id for e in new_entries}
            if record.head_id is not None and record.head_id not in fresh \
                    and not self.memory.get_messages([record.head_id]):
                raise ConversationConflict(cid)
            resource = thread.resource_id if thread is not None else record.scope or self.resource_id
            self.memory.create_thread(resource, thread_id=_thread_id(cid), metadata=_metadata(record))
            if new_entries:
                self.memory.save_messages([_message_of(e, cid, resource) for e in new_entries],
                                          keep_system=True)

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        await asyncio.to_thread(self._cas_delete, conversation_id, expected_revision)

    def _cas_delete(self, conversation_id: str, expected_revision: str) -> None:
        """Delete the record, then the entries no remaining conversation reaches: of its own
        thread, and of the threads of deleted conversations that its history ran into."""
        tid = _thread_id(conversation_id)
        with self.memory.transaction():
            thread = self.memory.get_thread_by_id(tid)
            stored = _record_of(thread)
            if stored is None or stored.revision != expected_revision:
                raise ConversationConflict(conversation_id)
            entered = {e.thread_id for tip in [stored.head_id, *stored.branches]
                       for e in self._walk_messages(tip)} - {tid}
            self.memory.update_thread(tid, metadata={"live": False, "record": None, "revision": None})
            for other in [tid, *sorted(entered)]:
                if other == tid or _record_of(self.memory.get_thread_by_id(other)) is None:
                    self._release(other)

    def _release(self, tid: str) -> None:
        """Delete the entries of a thread without a record that no live fork reaches, and the
        thread once none is left."""
        own = {m.id for m in self.memory.recall(tid, per_page=False).messages}
        used = self._reached_by_forks(own)
        if not used:
            self.memory.delete_thread(tid)
        elif own - used:
            self.memory.delete_messages(sorted(own - used))

    def _reached_by_forks(self, ids: set[str]) -> set[str]:
        """Which of ``ids`` the histories of the live forked conversations reach (only a fork's
        history runs into another conversation's entries)."""
        reached: set[str] = set()
        forks = self.memory.list_threads(metadata={"kind": KIND, "live": True, "forked": True},
                                         per_page=False).threads
        for record in map(_record_of, forks):
            for tip in [record.head_id, *record.branches] if record is not None else ():
                reached.update(m.id for m in self._walk_messages(tip) if m.id in ids)
        return reached

    # -- entries

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        found = await asyncio.to_thread(self.memory.get_messages, [entry_id])
        if not found or found[0].type != KIND:
            raise KeyError(entry_id)
        return _entry_of(found[0])

    async def read_history(self, head_id: str | None, *,
                           limit: int | None = None) -> list[ConversationEntry]:
        """The entries from the first up to ``head_id`` (the last ``limit``), read from the
        thread that holds the head in one call and from others only where the chain enters them."""
        return await asyncio.to_thread(lambda: list(reversed(self._walk(head_id, limit))))

    def _walk(self, head_id: str | None, limit: int | None = None) -> list[ConversationEntry]:
        """The chain from ``head_id`` back to the first entry, newest first."""
        return [_entry_of(m) for m in self._walk_messages(head_id, limit)]

    def _walk_messages(self, head_id: str | None, limit: int | None = None) -> list[Message]:
        """The stored messages of the chain from ``head_id`` back, newest first; each thread the
        chain enters is read whole, once."""
        chain: list[Message] = []
        known: dict[str, Message] = {}
        entry_id = head_id
        while entry_id is not None and (limit is None or len(chain) < limit):
            message = known.get(entry_id)
            if message is None:
                found = self.memory.get_messages([entry_id])
                if not found or found[0].type != KIND:
                    raise KeyError(entry_id)
                message = found[0]
                known.update((m.id, m) for m in self.memory.recall(
                    message.thread_id, per_page=False).messages)
            chain.append(message)
            entry_id = message.metadata["parent_id"]
        return chain


def _thread_id(conversation_id: str) -> str:
    return _PREFIX + conversation_id


def _metadata(record: ConversationRecord) -> dict[str, Any]:
    return {"kind": KIND, "live": True, "scope": record.scope, "forked": record.forked_from is not None,
            "revision": record.revision, "record": _RECORD.dump_python(record, mode="json")}


def _record_of(thread: Thread | None) -> ConversationRecord | None:
    if thread is None or thread.metadata.get("kind") != KIND or not thread.metadata.get("record"):
        return None
    return _RECORD.validate_python(thread.metadata["record"])


def _message_of(entry: ConversationEntry, conversation_id: str, resource_id: str) -> dict[str, Any]:
    message = entry.message
    role = "assistant" if isinstance(message, _messages.ModelResponse) else "user"
    return {
        "id": entry.id, "thread_id": _thread_id(conversation_id), "resource_id": resource_id,
        "role": role, "type": KIND,
        "content": {"text": _text_of(message) or None, "parts": [
            {"type": "data", "message": _MESSAGES.dump_python([message], mode="json")[0]}]},
        "metadata": {"parent_id": entry.parent_id, "entry_kind": entry.kind},
    }


def _entry_of(message: Message) -> ConversationEntry:
    (model_message,) = _MESSAGES.validate_python([message.content.parts[0]["message"]])
    return ConversationEntry(id=message.id, parent_id=message.metadata["parent_id"],
                             message=model_message, kind=message.metadata.get("entry_kind", "message"))


def _text_of(message: _messages.ModelMessage) -> str:
    """What is recalled and searched of a model message: its user prompts or its text."""
    texts = []
    for part in message.parts:
        if isinstance(part, _messages.UserPromptPart) and isinstance(part.content, str):
            texts.append(part.content)
        elif isinstance(part, _messages.TextPart):
            texts.append(part.content)
    return "\n".join(t for t in texts if t)
