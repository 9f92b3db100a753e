"""LlamaIndex chat stores over a ``Memory``: ``ThreadRecallChatStore`` (``BaseChatStore``, for
chat engines and ``ChatMemoryBuffer``) and ``ThreadRecallDBChatStore`` (``AsyncDBChatStore``,
for ``llama_index.core.memory.Memory`` with its archiving).

A key is a thread (owned by the resource of the same name unless the store names one). Each
``ChatMessage`` becomes one message: its text, images, audio, video, documents, thinking and
tool-call blocks become the library's own parts, and what has no place there is kept under
``metadata["llama_index"]`` and under ``"llama_index"`` on each part, so every message comes
back equal to the one given. ``metadata["status"]`` is ``"active"`` or ``"archived"``; both
stores read and write the same messages.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.storage.chat_store.base import BaseChatStore
from llama_index.core.storage.chat_store.base_db import AsyncDBChatStore, MessageStatus
from pydantic_core import PydanticSerializationError

from ..errors import InvalidArgumentError, ResourceMismatchError
from ..memory import Memory
from ..recall import check_thread_id
from ..storage.rows import MessageRow, messages_of
from ..types import Message, Thread
from .conversions import Conversions
from .parts import PartCodec

__all__ = ["ThreadRecallChatStore", "ThreadRecallDBChatStore", "chat_message", "message_of"]

KEY = "llama_index"
THREAD_MARK = {"chat_store": "llama_index"}

_PARTS = PartCodec(KEY, {
    "text": ("text", {"text": "text"}),
    "image": ("file", {"data": "image", "url": "url", "media_type": "image_mimetype"}),
    "audio": ("file", {"data": "audio", "url": "url"}),
    "video": ("file", {"data": "video", "url": "url", "media_type": "video_mimetype"}),
    "document": ("file", {"data": "data", "url": "url", "filename": "title",
                          "media_type": "document_mimetype"}),
    "thinking": ("reasoning", {"text": "content"}),
    "tool_call": ("tool-invocation", {("tool_invocation", "tool_call_id"): "tool_call_id",
                                      ("tool_invocation", "tool_name"): "tool_name",
                                      ("tool_invocation", "args"): "tool_kwargs"}),
}, tag="block_type", fixed={"tool_call": {"tool_invocation": {"state": "call"}}})

_MESSAGE = operator.attrgetter("message")  # of a _Built

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
          "tool": "tool", "function": "tool", "chatbot": "assistant", "model": "assistant"}


class _Threads:
    """What both stores share: keys as threads of a ``Memory``, messages in order."""

    if TYPE_CHECKING:
        memory: Memory
        resource_id: str | None
        _reads: dict[str | None, Conversions[_Built]]  # by the status read (None: any)

    def _resource(self, key: str) -> str:
        return self.resource_id or key

    def _thread(self, key: Any) -> str:
        return check_thread_id(key)

    def _rows(self, key: str, messages: Sequence[ChatMessage], status: str) -> list[dict[str, Any]]:
        _check_list(messages)
        rows = [message_of(m) for m in messages]
        for row in rows:
            row["thread_id"], row["resource_id"] = key, self._resource(key)
            row["metadata"]["status"] = status
        return rows

    def _stored_rows(self, key: str, status: str | None = None) -> list[MessageRow]:
        """The key's stored messages with ``status`` (any when None), oldest first, undecoded."""
        if self._owned(self._thread(key)) is None:
            return []
        return self.memory._thread_rows(key, metadata={"status": status} if status else None)

    def _read(self, key: str, status: str | None = None) -> tuple[list[MessageRow], list[_Built]]:
        """``_stored_rows``, and the ``_Built`` of each row: decoded and built only for the
        rows added or changed since the previous read with this status (``Conversions``)."""
        rows = self._stored_rows(key, status)
        return rows, self._reads[status].of_rows(rows, key)

    def _append(self, key: str, rows: list[dict[str, Any]]) -> None:
        with self.memory.transaction():
            if self._owned(key) is None:
                self.memory.create_thread(self._resource(key), thread_id=key, metadata=THREAD_MARK)
            if rows:
                self.memory.save_messages(rows, keep_system=True)

    def _replace(self, key: str, messages: Sequence[ChatMessage], status: str) -> None:
        """Make ``messages`` the key's messages, in one transaction. Stored messages that are
        the first of ``messages`` as saving them would store them (a caller setting the
        history it read, with new messages after it) stay, and only the rest is written; any
        other list replaces the thread's messages."""
        _check_list(messages)
        with self.memory.transaction():
            thread = self._owned(key)
            if thread is not None:
                marked = thread.metadata.items() >= THREAD_MARK.items()
                kept = self._kept(key, messages, status) if marked else None
                if kept is not None:
                    self._append(key, self._rows(key, messages[kept:], status))
                    return
                rows = self._rows(key, messages, status)
                self.memory.delete_thread(key)
                self._append(key, rows)
                return
            self._append(key, self._rows(key, messages, status))

    def _kept(self, key: str, messages: Sequence[ChatMessage], status: str) -> int | None:
        """How many stored messages ``_replace`` keeps: all of them when they are the first of
        ``messages`` as saving those would store them, else None.

        A message is compared by its fingerprint with that of the message built from the
        stored one at the last read: the same fingerprint gives the same row, so only the
        messages that differ from what was read are converted and compared with the stored
        ones (and whether a message built from a stored one stores it again is asked once)."""
        rows, built = self._read(key)
        if len(built) > len(messages):
            return None
        active = status == MessageStatus.ACTIVE.value
        for row, known, message in zip(rows, built, messages):
            unchanged = known.fingerprint is not None and _fingerprint(message) == known.fingerprint
            if unchanged and active and known.same:
                continue
            same = _same(messages_of([row])[0], self._rows(key, [message], status)[0])
            if unchanged and active:
                known.same = same
            if not same:
                return None
        return len(built)

    def _owned(self, key: str) -> Thread | None:
        """The key's thread (None when it does not exist); another resource's is refused."""
        thread = self.memory.get_thread_by_id(key)
        if thread is not None and thread.resource_id != self._resource(key):
            raise ResourceMismatchError(
                f"Thread with id {key} is for resource with id {thread.resource_id} "
                f"but resource {self._resource(key)} was queried")
        return thread

    def _keys(self) -> list[str]:
        page = self.memory.list_threads(resource_id=self.resource_id, metadata=THREAD_MARK, per_page=False,
                                        order_by={"field": "created_at", "direction": "ASC"})
        return [t.id for t in page.threads]


class ThreadRecallChatStore(_Threads, BaseChatStore):
    """LlamaIndex ``BaseChatStore`` keeping each key's messages as a thread of ``memory``.

    >>> from threadrecall import Memory
    >>> from llama_index.core.base.llms.types import ChatMessage
    >>> store = ThreadRecallChatStore(Memory())
    >>> store.add_message("user-1", ChatMessage(role="user", content="Hi"))
    >>> [str(m) for m in store.get_messages("user-1")], store.get_keys()
    (['user: Hi'], ['user-1'])
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)
    memory: Any = Field(exclude=True)
    resource_id: str | None = None
    _reads: dict[str | None, Conversions[_Built]] = PrivateAttr()

    def __init__(self, memory: Memory, *, resource_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(memory=memory, resource_id=resource_id, **kwargs)  # type: ignore[call-arg]
        self._reads = {None: Conversions(_Built)}

    @classmethod
    def class_name(cls) -> str:
        return "ThreadRecallChatStore"

    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """Replace the key's messages, in one transaction (writing only what is new when the
        stored messages are the first of ``messages``)."""
        self._replace(self._thread(key), messages, MessageStatus.ACTIVE.value)

    def get_messages(self, key: str) -> list[ChatMessage]:
        """The key's messages, oldest first ([] for an unknown key). A read decodes and builds
        only the messages added or changed since the key's previous read (``Conversions``)."""
        return list(map(_MESSAGE, self._read(key)[1]))

    def add_message(self, key: str, message: ChatMessage, idx: int | None = None) -> None:
        """Append a message (or insert it at ``idx``)."""
        rows = self._rows(self._thread(key), [message], MessageStatus.ACTIVE.value)
        if idx is None:
            self._append(key, rows)
            return
        with self.memory.transaction():
            messages = self.get_messages(key)
            messages.insert(idx, message)
            self.set_messages(key, messages)

    def delete_messages(self, key: str) -> list[ChatMessage] | None:
        """Remove the key and return its messages (None for an unknown key)."""
        with self.memory.transaction():
            if self._owned(self._thread(key)) is None:
                return None
            gone = self.get_messages(key)
            self.memory.delete_thread(key)
        return gone

    def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Remove the message at position ``idx`` and return it (None when there is none)."""
        with self.memory.transaction():
            rows = self._stored_rows(key)
            if not isinstance(idx, int) or not -len(rows) <= idx < len(rows):
                return None
            self.memory.delete_messages([rows[idx][0]])
        return chat_message(messages_of([rows[idx]])[0])

    def delete_last_message(self, key: str) -> ChatMessage | None:
        """Remove the newest message and return it (None when there is none)."""
        return self.delete_message(key, -1)

    def get_keys(self) -> list[str]:
        """Every key of this store, oldest first."""
        return self._keys()

    async def aset_messages(self, key: str, messages: list[ChatMessage]) -> None:
        await _in_transaction(self.memory, self.set_messages, key, messages)

    async def aget_messages(self, key: str) -> list[ChatMessage]:
        return await _in_transaction(self.memory, self.get_messages, key)

    async def async_add_message(self, key: str, message: ChatMessage, idx: int | None = None) -> None:
        await _in_transaction(self.memory, self.add_message, key, message, idx)

    async def adelete_messages(self, key: str) -> list[ChatMessage] | None:
        return await _in_transaction(self.memory, self.delete_messages, key)

    async def adelete_message(self, key: str, idx: int) -> ChatMessage | None:
        return await _in_transaction(self.memory, self.delete_message, key, idx)

    async def adelete_last_message(self, key: str) -> ChatMessage | None:
        return await _in_transaction(self.memory, self.delete_last_message, key)

    async def aget_keys(self) -> list[str]:
        return await _in_transaction(self.memory, self.get_keys)


class ThreadRecallDBChatStore(_Threads, AsyncDBChatStore):
    """LlamaIndex ``AsyncDBChatStore`` for ``Memory.from_defaults(chat_store=...)``: an active
    queue and an archive per key, both kept in ``memory``.

    >>> import asyncio
    >>> from threadrecall import Memory
    >>> from llama_index.core.base.llms.types import ChatMessage
    >>> store = ThreadRecallDBChatStore(Memory())
    >>> asyncio.run(store.add_messages("s", [ChatMessage(content="a"), ChatMessage(content="b")]))
    >>> [m.content for m in asyncio.run(store.archive_oldest_messages("s", 1))]
    ['a']
    >>> [m.content for m in asyncio.run(store.get_messages("s"))], asyncio.run(store.count_messages("s", None))
    (['b'], 2)
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)
    memory: Any = Field(exclude=True)
    resource_id: str | None = None

    _reads: dict[str | None, Conversions[_Built]] = PrivateAttr()

    def __init__(self, memory: Memory, *, resource_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(memory=memory, resource_id=resource_id, **kwargs)  # type: ignore[call-arg]
        self._reads = {status: Conversions(_Copied) for status in (None, "active", "archived")}

    @classmethod
    def class_name(cls) -> str:
        return "ThreadRecallDBChatStore"

    async def get_messages(self, key: str, status: MessageStatus | None = MessageStatus.ACTIVE,
                           limit: int | None = None, offset: int | None = None) -> list[ChatMessage]:
        """The key's messages with ``status`` (any when None), oldest first, after ``offset``."""
        for name, value in (("limit", limit), ("offset", offset)):
            if value is not None and (not isinstance(value, int) or value < 0):
                raise InvalidArgumentError(f"{name} must be a non-negative integer")
        _, built = await _in_transaction(self.memory, self._read, key, _status(status))
        start = offset or 0
        end = None if limit is None else start + limit
        # Copied on every read: llama_index's Memory writes its memory blocks into the
        # messages it gets, which a shared object would carry into the next read.
        return [_fresh(b) for b in built[start:end]]

    async def count_messages(self, key: str, status: MessageStatus | None = MessageStatus.ACTIVE) -> int:
        return len(await _in_transaction(self.memory, self._stored_rows, key, _status(status)))

    async def add_message(self, key: str, message: ChatMessage,
                          status: MessageStatus = MessageStatus.ACTIVE) -> None:
        await self.add_messages(key, [message], status)

    async def add_messages(self, key: str, messages: list[ChatMessage],
                           status: MessageStatus = MessageStatus.ACTIVE) -> None:
        rows = self._rows(self._thread(key), messages, _status(status) or "active")
        await _in_transaction(self.memory, self._append, key, rows)

    async def set_messages(self, key: str, messages: list[ChatMessage],
                           status: MessageStatus = MessageStatus.ACTIVE) -> None:
        await _in_transaction(self.memory, self._replace, self._thread(key), messages,
                              _status(status) or "active")

    async def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Remove the message at position ``idx`` (among all statuses) and return it."""
        def pop() -> ChatMessage | None:
            rows, built = self._read(key)
            if not isinstance(idx, int) or not -len(rows) <= idx < len(rows):
                return None
            self.memory.delete_messages([rows[idx][0]])
            return _fresh(built[idx])

        return await _in_transaction(self.memory, pop)  # type: ignore[no-any-return]

    async def delete_messages(self, key: str, status: MessageStatus | None = None) -> None:
        def delete() -> None:
            if status is None:
                if self._owned(self._thread(key)) is not None:
                    self.memory.delete_thread(key)
                return
            self.memory.delete_messages([row[0] for row in self._stored_rows(key, _status(status))])

        await _in_transaction(self.memory, delete)

    async def delete_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        def delete() -> list[ChatMessage]:
            rows, built = self._read(key, "active")
            oldest = _count(n)
            self.memory.delete_messages([row[0] for row in rows[:oldest]])
            return [_fresh(b) for b in built[:oldest]]

        return await _in_transaction(self.memory, delete)  # type: ignore[no-any-return]

    async def archive_oldest_messages(self, key: str, n: int) -> list[ChatMessage]:
        def archive() -> list[ChatMessage]:
            rows, built = self._read(key, "active")
            oldest = _count(n)
            self.memory.update_messages([{"id": row[0], "metadata": {"status": "archived"}}
                                         for row in rows[:oldest]])
            return [_fresh(b) for b in built[:oldest]]

        return await _in_transaction(self.memory, archive)  # type: ignore[no-any-return]

    async def get_keys(self) -> list[str]:
        return await _in_transaction(self.memory, self._keys)


async def _in_transaction(memory: Memory, call: Any, *args: Any) -> Any:
    """Run a blocking store operation in one transaction of ``memory``, off the event loop."""
    def run() -> Any:
        with memory.transaction():
            return call(*args)

    return await asyncio.to_thread(run)


class _Built:
    """The ``ChatMessage`` built from a stored message, its fingerprint as built, and whether
    setting it again (as active) would store that very message (None until a
    ``set_messages`` has compared them; it holds while the stored message is unchanged,
    which is while ``Conversions`` gives back this object for it). A ``_Copied`` also keeps
    the fields the message was built from, to build copies of it."""

    __slots__ = ("data", "message", "fingerprint", "same")
    keeps_data = False

    def __init__(self, stored: Message) -> None:
        data = _chat_data(stored)
        self.data: dict[str, Any] | None = data if self.keeps_data else None
        self.message = ChatMessage.model_validate(_copied(data) if self.keeps_data else data)
        self.fingerprint = _fingerprint(self.message)
        self.same: bool | None = None


class _Copied(_Built):
    __slots__ = ()
    keeps_data = True


def _fingerprint(message: Any) -> tuple[MessageRole, str] | bytes | None:
    """What ``message_of`` reads of a ``ChatMessage``, its JSON as its own serializer writes
    it, in a form quick to compare: two messages with the same fingerprint give the same row.
    A message of one plain text block and nothing else, the common one, is its role and
    text, without serializing it. None for what is not a ``ChatMessage`` or does not
    serialize (``message_of`` says why)."""
    if type(message) is ChatMessage and message.__pydantic_extra__ is None:
        kwargs, blocks, role = message.additional_kwargs, message.blocks, message.role
        if type(kwargs) is dict and not kwargs and type(blocks) is list and len(blocks) == 1:
            block = blocks[0]
            if (type(block) is TextBlock and block.__pydantic_extra__ is None and type(role) is MessageRole
                    and block.block_type == "text" and type(block.text) is str):
                return role, block.text
    if not isinstance(message, ChatMessage):
        return None
    try:
        return message.__pydantic_serializer__.to_json(message)
    except PydanticSerializationError:
        return None


def _fresh(built: _Built) -> ChatMessage:
    """A ``ChatMessage`` built as ``built.message`` was (``built`` is a ``_Copied``), sharing
    nothing with it."""
    assert built.data is not None
    return ChatMessage.model_validate(_copied(built.data))


def _copied(value: Any) -> Any:
    """A copy of JSON values (what ``_chat_data`` gives) whose dicts and lists are its own."""
    if type(value) is dict:
        return {k: _copied(v) for k, v in value.items()}
    if type(value) is list:
        return [_copied(v) for v in value]
    return value


def _check_list(messages: Any) -> None:
    if isinstance(messages, (str, bytes, ChatMessage)) or not isinstance(messages, Sequence):
        raise InvalidArgumentError("messages must be a list of ChatMessage")


def _same(stored: Message, row: Mapping[str, Any]) -> bool:
    """Whether a stored message is what saving ``row`` (a ``_rows`` dict) would store."""
    return (stored.role == row["role"] and stored.type == "text" and stored.content.text is None
            and stored.content.parts == row["content"]["parts"] and stored.metadata == row["metadata"])


def _status(status: Any) -> str | None:
    if status is None:
        return None
    try:
        return MessageStatus(status).value
    except ValueError:
        raise InvalidArgumentError(f"status must be 'active' or 'archived', got {status!r}") from None


def _count(n: Any) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise InvalidArgumentError("n must be a non-negative integer")
    return n


# ----------------------------------------------------------------------------- conversions

def message_of(message: ChatMessage) -> dict[str, Any]:
    """The message (a dict for ``save_messages``) that keeps a ``ChatMessage``.

    >>> from llama_index.core.base.llms.types import ChatMessage
    >>> row = message_of(ChatMessage(role="developer", content="Be brief"))
    >>> row["role"], row["content"]["parts"][0]["text"]
    ('system', 'Be brief')
    """
    if not isinstance(message, ChatMessage):
        raise InvalidArgumentError(f"expected a ChatMessage, got {type(message).__name__}")
    envelope = message.model_dump(mode="json")
    blocks = envelope.pop("blocks", [])
    envelope["blocks"] = []
    return {"role": _ROLES.get(envelope["role"], "assistant"),
            "content": {"parts": [_PARTS.encode(b) for b in blocks]}, "metadata": {KEY: envelope}}


def chat_message(message: Message) -> ChatMessage:
    """The ``ChatMessage`` a stored message keeps (or, for a message saved by other means, the
    nearest one: its role and text)."""
    return ChatMessage.model_validate(_chat_data(message))


def _chat_data(message: Message) -> dict[str, Any]:
    """The fields of ``chat_message(message)``, as JSON values."""
    envelope = message.metadata.get(KEY)
    if not isinstance(envelope, Mapping) or envelope.get("blocks") != []:
        return {"role": message.role, "blocks": [{"block_type": "text", "text": message.text}]}
    data = dict(envelope)
    data["blocks"] = [_PARTS.decode(p) or {"block_type": "text", "text": p.get("text", "")}
                      for p in message.content.parts]
    return data
