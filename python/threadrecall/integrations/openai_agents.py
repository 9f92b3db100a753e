"""``ThreadRecallSession``: the OpenAI Agents SDK ``Session`` protocol over a ``Memory``.

A session is a thread (its id is the session id). Each input item becomes one message: the
item's text, tool calls, tool results, reasoning summaries and files become the library's own
parts (so recall, search and summaries read them), and what has no place there is kept under
``metadata["openai_agents"]`` on the message and ``"openai_agents"`` on each part, so every item
comes back exactly as it was given. Roles the library lacks map to the nearest one
(``developer`` is stored as ``system``, with its own role kept).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from agents.items import TResponseInputItem
from agents.memory import SessionSettings
from agents.memory.session_settings import resolve_session_limit

from ..errors import ConfigurationError, InvalidArgumentError, ThreadNotFoundError
from ..memory import Memory
from ..types import Message
from .parts import PartCodec

__all__ = ["ThreadRecallSession", "item_to_message", "message_to_item"]

KEY = "openai_agents"

# role of a message item -> role stored
_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}

# content part type -> (part type stored, {stored key: path of the field moved into it})
_PARTS = PartCodec(KEY, {
    "input_text": ("text", {"text": ("text",)}),
    "output_text": ("text", {"text": ("text",)}),
    "refusal": ("text", {"text": ("refusal",)}),
    "summary_text": ("reasoning", {"text": ("text",)}),
    "input_image": ("file", {"url": ("image_url",), "file_id": ("file_id",)}),
    "input_file": ("file", {"filename": ("filename",), "data": ("file_data",), "url": ("file_url",),
                            "file_id": ("file_id",)}),
})


class ThreadRecallSession:
    """Conversation history of one Agents SDK session, kept in a threadrecall ``Memory``.

    Pass it as ``Runner.run(agent, input, session=ThreadRecallSession("chat-1", memory))``.
    ``resource_id`` names the owner of the thread (the session id when not given); when given,
    every call checks that it owns the thread.

    >>> import asyncio
    >>> from threadrecall import Memory
    >>> session = ThreadRecallSession("chat-1", Memory())
    >>> asyncio.run(session.add_items([{"role": "user", "content": "Hi"}]))
    >>> asyncio.run(session.get_items())
    [{'role': 'user', 'content': 'Hi'}]
    """

    def __init__(self, session_id: str, memory: Memory, *, resource_id: str | None = None,
                 session_settings: SessionSettings | None = None) -> None:
        if not isinstance(session_id, str) or not session_id.strip():
            raise InvalidArgumentError("session_id must be a non-empty string")
        self.session_id = session_id
        self.memory = memory
        self.resource_id = resource_id or session_id
        self._check_owner = resource_id is not None
        self.session_settings = session_settings or SessionSettings()

    @property
    def _owner(self) -> str | None:
        return self.resource_id if self._check_owner else None

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit``, only the newest ``limit``.

        >>> import asyncio
        >>> from threadrecall import Memory
        >>> session = ThreadRecallSession("chat-1", Memory())
        >>> asyncio.run(session.add_items([{"role": "user", "content": str(i)} for i in range(3)]))
        >>> [item["content"] for item in asyncio.run(session.get_items(limit=2))]
        ['1', '2']
        """
        limit = resolve_session_limit(limit, self.session_settings)
        if limit == 0:
            return []
        per_page: int | bool = False if limit is None or limit < 0 else limit
        return [cast(TResponseInputItem, message_to_item(m)) for m in await self._newest(per_page)]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append items in order, in one transaction."""
        messages = [item_to_message(item) for item in _items(items)]
        for message in messages:
            message["thread_id"], message["resource_id"] = self.session_id, self.resource_id
        if messages:
            await self.memory.asave_messages(messages, keep_system=True)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it (None when the session is empty); the read
        and the removal are one transaction, so two callers never pop the same item.

        >>> import asyncio
        >>> from threadrecall import Memory
        >>> session = ThreadRecallSession("chat-1", Memory())
        >>> asyncio.run(session.add_items([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]))
        >>> asyncio.run(session.pop_item())["content"], len(asyncio.run(session.get_items()))
        ('b', 1)
        """
        async with self.memory.atransaction():
            newest = await self._newest(1)
            if not newest:
                return None
            await self.memory.adelete_messages([newest[-1].id])
        return cast(TResponseInputItem, message_to_item(newest[-1]))

    async def clear_session(self) -> None:
        """Remove every item of the session (the thread goes too)."""
        await self._newest(0)
        await self.memory.adelete_thread(self.session_id)

    async def _newest(self, count: int | bool) -> list[Message]:
        """The newest ``count`` messages (``False``: all), after checking the owner."""
        try:
            result = await self.memory.arecall(self.session_id, resource_id=self._owner, per_page=count)
        except ThreadNotFoundError:
            return []
        return result.messages

    async def related_items(self, query: str, *, limit: int = 4,
                            scope: str = "resource") -> list[TResponseInputItem]:
        """The items most similar to ``query``, most similar first: from every session of
        this resource (``scope="resource"``) or this one (``"thread"``). Needs a ``Memory``
        with semantic recall on (items are embedded as they are added).

        >>> import asyncio
        >>> from threadrecall import Memory
        >>> from threadrecall.embedders import HashEmbedder
        >>> memory = Memory(embedder=HashEmbedder(), options={"semantic_recall": True})
        >>> session = ThreadRecallSession("chat-1", memory)
        >>> asyncio.run(session.add_items([{"role": "user", "content": "my passport expires in June"},
        ...                                {"role": "user", "content": "book a table in Lisbon"}]))
        >>> asyncio.run(session.related_items("passport renewal", limit=1))[0]["content"]
        'my passport expires in June'
        """
        if not isinstance(query, str) or not query.strip():
            raise InvalidArgumentError("query must be a non-empty string")
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidArgumentError("limit must be a positive integer")
        if scope not in ("resource", "thread"):
            raise InvalidArgumentError(f"scope must be 'resource' or 'thread', got {scope!r}")
        if self.memory.options.semantic is None:
            raise ConfigurationError(
                "related_items needs semantic recall: Memory(embedder=..., "
                "options={'semantic_recall': True})")
        result = await self.memory.arecall(
            self.session_id, resource_id=self.resource_id, vector_search_string=query, per_page=0,
            thread_config={"semantic_recall": {"top_k": limit, "message_range": 0, "scope": scope}},
        )
        scores = result.scores
        hits = sorted((m for m in result.messages if m.id in scores), key=lambda m: -scores[m.id])
        return [cast(TResponseInputItem, message_to_item(m)) for m in hits]


def _items(items: Any) -> list[Mapping[str, Any]]:
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, Sequence):
        raise InvalidArgumentError("items must be a list of input items")
    for item in items:
        if not isinstance(item, Mapping):
            raise InvalidArgumentError(f"an input item must be a dict, got {type(item).__name__}")
    return list(items)


# ----------------------------------------------------------------------------- items -> messages

def item_to_message(item: Mapping[str, Any]) -> dict[str, Any]:
    """The message (a dict for ``save_messages``) that keeps an input item.

    >>> item_to_message({"role": "developer", "content": "Be brief"})["role"]
    'system'
    >>> item_to_message({"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"})["content"]
    {'parts': [{'type': 'tool-invocation', 'tool_invocation': {'state': 'call', 'tool_call_id': 'c1', 'tool_name': 'f', 'args': {}}}]}
    """  # noqa: E501
    envelope = dict(item)
    kind = item.get("type", "message" if "role" in item else None)
    role = "tool" if str(kind).endswith("_output") else "assistant"
    parts: list[dict[str, Any]] = []
    if kind == "message" and item.get("role") in _ROLES:
        role = _ROLES[item["role"]]
        content = envelope.pop("content", None)
        if isinstance(content, str):
            parts = [{"type": "text", "text": content}]
        elif isinstance(content, list) and all(isinstance(p, Mapping) for p in content):
            parts, envelope["content"] = [_PARTS.encode(p) for p in content], []
        else:
            envelope["content"] = content
    elif kind == "function_call" and _strings(item, "call_id", "name"):
        del envelope["call_id"], envelope["name"]
        parts = [{"type": "tool-invocation", "tool_invocation": {
            "state": "call", "tool_call_id": item["call_id"], "tool_name": item["name"],
            "args": _arguments(item.get("arguments"))}}]
    elif kind == "function_call_output" and _strings(item, "call_id") and "output" in item:
        del envelope["call_id"], envelope["output"]
        parts = [{"type": "tool-invocation", "tool_invocation": {
            "state": "result", "tool_call_id": item["call_id"], "result": item["output"]}}]
    elif kind == "reasoning" and isinstance(item.get("summary"), list) and all(
            isinstance(p, Mapping) for p in item["summary"]):
        parts, envelope["summary"] = [_PARTS.encode(p) for p in item["summary"]], []
    return {"role": role, "content": {"parts": parts}, "metadata": {KEY: envelope}}


def _strings(item: Mapping[str, Any], *keys: str) -> bool:
    return all(isinstance(item.get(k), str) for k in keys)


def _arguments(arguments: Any) -> Any:
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


# ----------------------------------------------------------------------------- messages -> items

def message_to_item(message: Message) -> dict[str, Any]:
    """The input item a message keeps (or, for a message saved by other means, the nearest one).

    >>> from threadrecall import Memory
    >>> memory = Memory()
    >>> stored = memory.save_messages([{"thread_id": "t", "resource_id": "r", "role": "user",
    ...     "content": "Hi", **item_to_message({"role": "user", "content": "Hi"})}])
    >>> message_to_item(stored[0])
    {'role': 'user', 'content': 'Hi'}
    """
    envelope = message.metadata.get(KEY)
    if not isinstance(envelope, Mapping):
        return _foreign_item(message)
    item = dict(envelope)
    parts = message.content.parts
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message" and "content" not in item:
        item["content"] = " ".join(p.get("text", "") for p in parts if p.get("type") == "text")
    elif kind == "message" and item["content"] == []:
        item["content"] = [_item_part(p) for p in parts]
    elif kind == "reasoning" and item.get("summary") == []:
        item["summary"] = [_item_part(p) for p in parts]
    elif kind in ("function_call", "function_call_output"):
        call: Mapping[str, Any] = next((p["tool_invocation"] for p in parts if p.get("type") == "tool-invocation"), {})
        item["call_id"] = call.get("tool_call_id")
        if kind == "function_call":
            item["name"] = call.get("tool_name")
        else:
            item["output"] = call.get("result")
    return item


def _item_part(part: Mapping[str, Any]) -> dict[str, Any]:
    kept = _PARTS.decode(part)
    return kept if kept is not None else {"type": "input_text", "text": part.get("text", "")}


def _foreign_item(message: Message) -> dict[str, Any]:
    """The nearest item for a message this module did not write: a tool call or result, or a
    message with the message's text."""
    for part in message.content.parts:
        call = part.get("tool_invocation") if part.get("type") == "tool-invocation" else None
        if isinstance(call, Mapping) and call.get("tool_call_id"):
            if call.get("state") == "result" or message.role == "tool":
                return {"type": "function_call_output", "call_id": call["tool_call_id"],
                        "output": _output_text(call.get("result"))}
            if not message.text:
                return {"type": "function_call", "call_id": call["tool_call_id"],
                        "name": call.get("tool_name", ""),
                        "arguments": json.dumps(call.get("args", {}), ensure_ascii=False)}
    role = "user" if message.role == "tool" else message.role
    return {"role": role, "content": message.text}


def _output_text(result: Any) -> Any:
    return result if isinstance(result, (str, list)) else json.dumps(result, ensure_ascii=False)
