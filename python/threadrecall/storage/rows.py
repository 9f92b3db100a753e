"""The row form of a message that backends hand to recall: ids, time, order and one JSON body.

Every backend answers recall's reads with ``MessageRow`` tuples, so the code that merges pages
and windows, and the in-memory replica, treat all backends alike.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from .. import _core
from ..types import Message, MessageContent, dumps, to_utc

__all__ = ["ColumnRow", "MessageRow", "from_micros", "message_of", "messages_of", "new_id", "payload", "to_micros"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# What the core's decoder fills in: the two classes, and created_at as epoch + timedelta(µs).
_KINDS = (Message, MessageContent, _EPOCH, timedelta)

# A stored message: (id, thread_id, resource_id, created_at µs, seq, payload JSON), where the
# payload holds role, type, content and metadata, and seq is the insertion order that breaks
# ties in created_at.
MessageRow = tuple[str, str, "str | None", int, int, str]
# The same message with its body as the stored columns (role, type, content JSON, metadata
# JSON), as a SQL backend reads them: ``payload`` makes the ``MessageRow`` of it.
ColumnRow = tuple[str, str, "str | None", int, int, str, str, str, str]


def to_micros(value: datetime) -> int:
    delta = to_utc(value) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int) -> datetime:
    seconds, micros = divmod(value, 1_000_000)
    return _EPOCH + timedelta(0, seconds, micros)


def new_id() -> str:
    return str(uuid.uuid4())


def payload(role: str, type_: str, content: str, metadata: str) -> str:
    """The body of a message row, built from its already-encoded JSON columns."""
    return f'{{"role":{_quoted(role)},"type":{_quoted(type_)},"content":{content},"metadata":{metadata}}}'


@functools.lru_cache(maxsize=256)
def _quoted(text: str) -> str:
    """A JSON string literal (roles and types repeat, so they are encoded once)."""
    return dumps(text)


def message_of(row: MessageRow) -> Message:
    """Decode a row into a Message."""
    mid, thread_id, resource_id, micros, _seq, body_json = row
    body = json.loads(body_json)
    content = body["content"]
    return Message(
        id=mid,
        thread_id=thread_id,
        resource_id=resource_id,
        role=body["role"],
        content=MessageContent(parts=content.get("parts") or [], text=content.get("text")),
        created_at=from_micros(micros),
        type=body["type"],
        metadata=body["metadata"],
    )


def messages_of(rows: Sequence[MessageRow | ColumnRow]) -> list[Message]:
    """Decode rows into Messages, in one call of the core (``_core.stored_messages``), which
    parses the JSON texts straight into the values ``json.loads`` makes of them.

    A row is a ``MessageRow`` or a ``ColumnRow`` (its body as the stored columns: nothing to
    assemble, role and type not parsed at all). Stored rows hold values the dataclasses
    already accepted once, so the objects are filled in directly rather than through their
    (frozen, field-by-field) constructors. What the core leaves to Python (a lone surrogate
    escape, a text that is not JSON) is decoded by ``json.loads``, in one pass over the rows.

    >>> [(m.id, m.role, m.text, m.created_at.year) for m in messages_of([
    ...     ("m1", "t1", "r1", 1_700_000_000_000_000, 1, payload("user", "text", '{"parts": [], "text": "Hi"}', "{}")),
    ...     ("m2", "t1", "r1", 1_700_000_000_000_001, 2, "assistant", "text", '{"parts": [], "text": "Yes"}', "{}")])]
    [('m1', 'user', 'Hi', 2023), ('m2', 'assistant', 'Yes', 2023)]
    """
    if not rows:
        return []
    decoded = _core.stored_messages(rows, _KINDS)
    if decoded is not None:
        return decoded
    return _decoded(rows)


def _decoded(rows: Sequence[MessageRow | ColumnRow]) -> list[Message]:
    """``messages_of`` through Python's decoder: for the rows the core leaves to it (a lone
    surrogate escape, or texts that are not JSON, which then raise as ``json.loads`` does)."""
    texts: list[str] = []
    for row in rows:
        if len(row) == 9:
            texts += row[7:]
        else:
            texts.append(row[5])
    values = iter(json.loads("[" + ",".join(texts) + "]"))
    out: list[Message] = []
    append, new, fill, epoch, micro = out.append, object.__new__, object.__setattr__, _EPOCH, timedelta
    for row in rows:
        if len(row) == 9:
            columns: tuple[Any, ...] = row
            role, type_, stored, metadata = columns[5], columns[6], next(values), next(values)
        else:
            body = next(values)
            role, type_, stored, metadata = body["role"], body["type"], body["content"], body["metadata"]
        content = new(MessageContent)
        fill(content, "__dict__", {"parts": stored.get("parts") or [], "text": stored.get("text")})
        message = new(Message)
        fill(message, "__dict__", {
            "id": row[0], "thread_id": row[1], "resource_id": row[2], "role": role, "content": content,
            "created_at": epoch + micro(0, 0, row[3]), "type": type_, "metadata": metadata})
        append(message)
    return out

