"""``ThreadRecallChatMessageHistory``: LangChain's ``BaseChatMessageHistory`` over a ``Memory``.

Each LangChain message becomes one message of the thread: its text, images and files,
reasoning blocks, tool calls and tool results become the library's own parts (so recall,
search and summaries read them), and the fields with no place there (ids, names,
``additional_kwargs``, ``response_metadata``, usage, ...) are kept under
``metadata["langchain"]`` and under ``"langchain"`` on each part, so every message comes back
equal to the one given. Roles the library lacks map to the nearest one, keeping their own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
)

from ..errors import InvalidArgumentError, ResourceMismatchError, ThreadNotFoundError
from ..memory import Memory
from ..recall import check_thread_id
from ..types import Message
from .conversions import Conversions
from .parts import PartCodec

__all__ = ["ThreadRecallChatMessageHistory", "langchain_message", "message_of"]

KEY = "langchain"

_PARTS = PartCodec(KEY, {
    "text": ("text", {"text": ("text",)}),
    "image_url": ("file", {"url": ("image_url", "url")}),
    "image": ("file", {"url": ("url",), "data": ("base64",), "media_type": ("mime_type",),
                       "file_id": ("id",)}),
    "file": ("file", {"url": ("url",), "data": ("base64",), "media_type": ("mime_type",),
                      "file_id": ("id",)}),
    "audio": ("file", {"url": ("url",), "data": ("base64",), "media_type": ("mime_type",),
                       "file_id": ("id",)}),
    "video": ("file", {"url": ("url",), "data": ("base64",), "media_type": ("mime_type",),
                       "file_id": ("id",)}),
    "reasoning": ("reasoning", {"text": ("reasoning",)}),
    "thinking": ("reasoning", {"text": ("thinking",)}),
})

_CHAT_ROLES = {"user": "user", "human": "user", "assistant": "assistant", "ai": "assistant",
               "system": "system", "developer": "system", "tool": "tool", "function": "tool"}


class ThreadRecallChatMessageHistory(BaseChatMessageHistory):
    """The messages of one thread, as LangChain chat history (sync and async).

    ``resource_id`` owns the thread: it is created for that resource on the first message,
    and reading a thread that another resource owns raises ``ResourceMismatchError``.

    A read decodes and builds only the messages added or changed since the previous read and
    gives back the same LangChain objects for the others (``Conversions``), as
    ``InMemoryChatMessageHistory`` hands out the objects it holds.

    >>> from threadrecall import Memory
    >>> from langchain_core.messages import AIMessage, HumanMessage
    >>> history = ThreadRecallChatMessageHistory(Memory(), "chat-1", resource_id="alice")
    >>> history.add_messages([HumanMessage("Hi"), AIMessage("Hello!")])
    >>> history.messages
    [HumanMessage(content='Hi', additional_kwargs={}, response_metadata={}), AIMessage(content='Hello!', additional_kwargs={}, response_metadata={}, tool_calls=[], invalid_tool_calls=[])]
    """  # noqa: E501

    def __init__(self, memory: Memory, thread_id: str, *, resource_id: str) -> None:
        if not isinstance(resource_id, str) or not resource_id.strip():
            raise InvalidArgumentError("resource_id must be a non-empty string")
        self.memory = memory
        self.thread_id = check_thread_id(thread_id)
        self.resource_id = resource_id
        self._converted = Conversions(langchain_message)

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """Every message of the thread, oldest first."""
        try:
            rows = self.memory._thread_rows(self.thread_id, self.resource_id)
        except ThreadNotFoundError:
            return []
        return self._converted.of_rows(rows, self.thread_id)

    async def aget_messages(self) -> list[BaseMessage]:
        """The async twin of ``messages``."""
        try:
            rows = await self.memory._athread_rows(self.thread_id, self.resource_id)
        except ThreadNotFoundError:
            return []
        return self._converted.of_rows(rows, self.thread_id)

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append messages in order, in one transaction."""
        rows = self._rows(messages)
        if rows:
            self.memory.save_messages(rows, keep_system=True)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """The async twin of ``add_messages``."""
        rows = self._rows(messages)
        if rows:
            await self.memory.asave_messages(rows, keep_system=True)

    def clear(self) -> None:
        """Remove every message of the thread (and the thread)."""
        self._check_owner(self.memory.get_thread_by_id(self.thread_id))
        self.memory.delete_thread(self.thread_id)

    async def aclear(self) -> None:
        """The async twin of ``clear``."""
        self._check_owner(await self.memory.aget_thread_by_id(self.thread_id))
        await self.memory.adelete_thread(self.thread_id)

    def _check_owner(self, thread: Any) -> None:
        if thread is not None and thread.resource_id != self.resource_id:
            raise ResourceMismatchError(
                f"Thread with id {self.thread_id} is for resource with id {thread.resource_id} "
                f"but resource {self.resource_id} was queried"
            )

    def _rows(self, messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
        if isinstance(messages, (str, bytes, BaseMessage)) or not isinstance(messages, Sequence):
            raise InvalidArgumentError("messages must be a list of LangChain messages")
        rows = [message_of(m) for m in messages]
        for row in rows:
            row["thread_id"], row["resource_id"] = self.thread_id, self.resource_id
        return rows


# ----------------------------------------------------------------------------- to the library

def message_of(message: BaseMessage) -> dict[str, Any]:
    """The message (a dict for ``save_messages``) that keeps a LangChain message.

    >>> from langchain_core.messages import AIMessage
    >>> row = message_of(AIMessage("", tool_calls=[{"name": "f", "args": {"a": 1}, "id": "c1"}]))
    >>> row["role"], row["content"]["parts"][-1]["tool_invocation"]
    ('assistant', {'state': 'call', 'tool_call_id': 'c1', 'tool_name': 'f', 'args': {'a': 1}})
    """
    if not isinstance(message, BaseMessage):
        raise InvalidArgumentError(f"expected a LangChain message, got {type(message).__name__}")
    envelope = {"type": message.type, **message.model_dump(exclude_defaults=True)}
    content = envelope.pop("content", "")
    parts: list[dict[str, Any]] = []
    if isinstance(message, ToolMessage):
        del envelope["tool_call_id"]
        parts.append({"type": "tool-invocation", "tool_invocation": {
            "state": "result", "tool_call_id": message.tool_call_id, "tool_name": message.name or "",
            "result": content}})
    elif isinstance(content, str):
        parts.append({"type": "text", "text": content})
    else:
        envelope["content"] = []
        parts.extend(_PARTS.encode(b) if isinstance(b, Mapping) else {"type": "text", "text": b}
                     for b in content)
    if isinstance(message, AIMessage) and "tool_calls" in envelope:
        envelope["tool_calls"] = []
        parts.extend({"type": "tool-invocation", "tool_invocation": {
            "state": "call", "tool_call_id": call["id"], "tool_name": call["name"], "args": call["args"]},
            KEY: {k: v for k, v in call.items() if k not in ("id", "name", "args")}}
            for call in message.tool_calls)
    return {"role": _role(message), "content": {"parts": parts}, "metadata": {KEY: envelope}}


def _role(message: BaseMessage) -> str:
    if isinstance(message, HumanMessage):
        return "user"
    if isinstance(message, SystemMessage):
        return "system"
    if isinstance(message, ChatMessage):
        return _CHAT_ROLES.get(message.role, "assistant")
    if isinstance(message, AIMessage):
        return "assistant"
    return "tool"  # ToolMessage, FunctionMessage


# ----------------------------------------------------------------------------- to LangChain

def langchain_message(message: Message) -> BaseMessage:
    """The LangChain message a stored message keeps (or, for a message saved by other means,
    the nearest one)."""
    envelope = message.metadata.get(KEY)
    if not isinstance(envelope, Mapping) or not isinstance(envelope.get("type"), str):
        return _foreign(message)
    data = dict(envelope)
    calls = [p for p in message.content.parts if p.get("type") == "tool-invocation"]
    others = [p for p in message.content.parts if p.get("type") != "tool-invocation"]
    if data["type"] in ("tool", "ToolMessageChunk"):
        result = calls[0]["tool_invocation"] if calls else {}
        data["tool_call_id"], data["content"] = result.get("tool_call_id", ""), result.get("result", "")
    elif data.get("content") == []:
        data["content"] = [_block(p) for p in others]
    else:
        data["content"] = " ".join(p.get("text", "") for p in others if p.get("type") == "text")
    if data.get("tool_calls") == []:
        data["tool_calls"] = [{**(p.get(KEY) or {}), "id": c["tool_call_id"], "name": c["tool_name"],
                               "args": c.get("args", {})}
                              for p in calls for c in [p["tool_invocation"]] if c.get("state") == "call"]
    return messages_from_dict([{"type": data["type"], "data": data}])[0]


def _block(part: Mapping[str, Any]) -> Any:
    kept = _PARTS.decode(part)
    if kept is not None:
        return kept
    return part.get("text", "") if part.get("type") == "text" else dict(part)


def _foreign(message: Message) -> BaseMessage:
    """The nearest LangChain message for a message this module did not write."""
    calls = [p["tool_invocation"] for p in message.content.parts
             if p.get("type") == "tool-invocation" and isinstance(p.get("tool_invocation"), Mapping)]
    if message.role == "tool" or any(c.get("state") == "result" for c in calls):
        call = calls[0] if calls else {}
        result = call.get("result", message.text)
        return ToolMessage(content=result if isinstance(result, (str, list)) else str(result),
                           tool_call_id=call.get("tool_call_id") or "", name=call.get("tool_name"))
    if message.role == "assistant":
        return AIMessage(content=message.text, tool_calls=[
            {"id": c.get("tool_call_id"), "name": c.get("tool_name", ""), "args": c.get("args") or {}}
            for c in calls if c.get("state") == "call"])
    if message.role == "system":
        return SystemMessage(content=message.text)
    return HumanMessage(content=message.text)
