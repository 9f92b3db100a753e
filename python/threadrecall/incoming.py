"""What callers pass in as messages and values, checked before anything is written.

A message given as a ``Message`` or a dict becomes a complete ``Message`` here, or raises one of
``threadrecall.errors`` naming the cause: ids and texts that UTF-8 can store (ids and titles
without a NUL character), JSON-only metadata and content, a known role, a time in range.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from .errors import InvalidArgumentError
from .recall import check_thread_id
from .storage.duckdb import new_id
from .types import ROLES, Message, MessageContent, check_json, check_name, check_text, parse_time

__all__ = [
    "apply_update",
    "check_id",
    "incoming_message",
    "json_mapping",
    "sequence",
    "title_of",
    "update_of",
]


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
    check_id(mid, "message id")
    label = f"message {mid}" if data.get("id") else "a message without an id"
    resource = data.get("resource_id")
    if resource is not None:
        check_id(resource, "resource_id")
    try:
        content = MessageContent.coerce(data.get("content"))
        created_at = parse_time(data.get("created_at")) or datetime.now(timezone.utc)
    except (TypeError, ValueError, OverflowError, OSError) as exc:
        raise InvalidArgumentError(f"{label}: {exc}") from None
    _check_content(content, label)
    return Message(
        id=mid, thread_id=thread, resource_id=resource, role=role, content=content,
        created_at=created_at, type=_message_type(data.get("type")),
        metadata=json_mapping(data.get("metadata"), f"{label}: metadata"),
    )


def _check_content(content: MessageContent, label: str) -> None:
    """Raise unless UTF-8 JSON can hold the content (its parts and text)."""
    check_json(content.parts, f"{label}: content parts")
    if content.text is not None:
        check_text(content.text, f"{label}: text")


def _message_type(value: Any) -> str:
    if value is None or value == "":
        return "text"
    if not isinstance(value, str):
        raise InvalidArgumentError(f"message type must be a string, got {type(value).__name__}")
    return check_name(value, "message type")


def title_of(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidArgumentError(f"title must be a string, got {type(value).__name__}")
    return None if value is None else check_name(value, "title")


def update_of(value: Mapping[str, Any] | Message) -> dict[str, Any]:
    data = value.to_dict() if isinstance(value, Message) else dict(value)
    if not isinstance(data.get("id"), str) or not data["id"].strip():
        raise InvalidArgumentError("All message IDs must be non-empty strings")
    allowed = {"id", "thread_id", "resource_id", "role", "content", "type", "metadata", "created_at"}
    unknown = set(data) - allowed
    if unknown:
        raise InvalidArgumentError(f"unknown message field(s): {', '.join(sorted(unknown))}")
    return data


def apply_update(current: Message, patch: Mapping[str, Any]) -> Message:
    fields: dict[str, Any] = {}
    if "content" in patch:
        new = patch["content"]
        if isinstance(new, Mapping):
            old = current.content
            parts = new.get("parts", old.parts)
            text = new.get("text", old.text)
            fields["content"] = MessageContent.coerce({"parts": parts or [], "text": text})
        else:
            fields["content"] = MessageContent.coerce(new)
        _check_content(fields["content"], f"message {current.id}")
    if "metadata" in patch:
        fields["metadata"] = {**current.metadata, **json_mapping(patch["metadata"], "message metadata")}
    for key in ("thread_id", "resource_id", "role", "type"):
        if patch.get(key) is not None:
            fields[key] = patch[key]
    if fields.get("role", current.role) not in ROLES:
        raise InvalidArgumentError(f"message role must be one of {', '.join(ROLES)}")
    if "thread_id" in fields:
        check_thread_id(fields["thread_id"])
    if "resource_id" in fields:
        check_id(fields["resource_id"], "resource_id")
    if "type" in fields:
        fields["type"] = _message_type(fields["type"])
    return replace(current, **fields)


def sequence(value: Any, what: str) -> list[Any]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidArgumentError(f"{what} must be a list")
    return list(value)


def json_mapping(value: Any, what: str) -> dict[str, Any]:
    """A copy of a JSON dict (keys strings, values JSON); anything else raises."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(f"{what} must be a dict, got {type(value).__name__}")
    out = dict(value)
    check_json(out, what)
    return out


def check_id(value: Any, what: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"{what} must be a non-empty string")
    check_name(value, what)
