"""The value types of threadrecall: threads, messages, resources and results.

All are frozen dataclasses with ``to_dict()`` / ``from_dict()`` for JSON. Times are timezone-aware
UTC ``datetime``s; naive input is taken as UTC.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, overload

from . import _core
from .errors import InvalidArgumentError, UnsupportedValueError

__all__ = [
    "Role",
    "MessageContent",
    "Message",
    "Thread",
    "Resource",
    "RecallResult",
    "ThreadPage",
    "QueryResult",
    "search_text",
    "check_json",
    "check_name",
    "check_text",
    "check_texts",
    "IndexStats",
    "to_utc",
    "parse_time",
]

Role = str  # "user" | "assistant" | "system" | "tool"
ROLES = ("user", "assistant", "system", "tool")


def to_utc(value: datetime) -> datetime:
    """Return ``value`` as an aware UTC datetime (a naive one is taken as UTC)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


@overload
def parse_time(value: datetime | str | int | float) -> datetime: ...
@overload
def parse_time(value: None) -> None: ...
def parse_time(value: datetime | str | int | float | None) -> datetime | None:
    """Accept a datetime, an ISO-8601 string or epoch seconds; return aware UTC (or None)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return to_utc(value)
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        return to_utc(datetime.fromisoformat(text))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, tz=timezone.utc)
    raise TypeError(f"expected a datetime, an ISO-8601 string or epoch seconds, got {value!r}")


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


@dataclass(frozen=True)
class MessageContent:
    """A message's content: a list of parts (dicts) and an optional plain ``text``.

    >>> MessageContent.coerce("Hi").parts
    [{'type': 'text', 'text': 'Hi'}]
    """

    parts: list[dict[str, Any]] = field(default_factory=list)
    text: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.parts, list):  # a tuple or other sequence given: kept as a list
            object.__setattr__(self, "parts", list(self.parts))

    @classmethod
    def coerce(cls, value: Any) -> MessageContent:
        """Build content from a ``str``, a ``{"parts": [...], "text"?: ...}`` dict or itself."""
        if isinstance(value, MessageContent):
            return value
        if value is None:
            return cls()
        if isinstance(value, str):
            return cls(parts=[{"type": "text", "text": value}])
        if isinstance(value, Mapping):
            parts = value.get("parts") or ()
            if isinstance(parts, (str, bytes)) or not all(type(p) is dict or isinstance(p, Mapping)
                                                          for p in parts):
                raise TypeError("content parts must be a list of dicts")
            text = value.get("text", value.get("content"))
            if text is not None and not isinstance(text, str):
                text = None
            return cls(parts=[dict(p) for p in parts], text=text)
        if isinstance(value, (list, tuple)):
            if not all(isinstance(p, Mapping) for p in value):
                raise TypeError("content parts must be a list of dicts")
            return cls(parts=[dict(p) for p in value])
        raise TypeError(f"message content must be a str or a dict with parts, got {type(value).__name__}")

    @property
    def plain_text(self) -> str:
        """The searchable text: ``text`` when set, else the text parts joined by a space."""
        if self.text and self.text.strip():
            return self.text
        return " ".join(
            p["text"] for p in self.parts if p.get("type") == "text" and isinstance(p.get("text"), str)
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"parts": [dict(p) for p in self.parts]}
        if self.text is not None:
            out["text"] = self.text
        return out


def search_text(text: str, metadata: Mapping[str, Any] | None) -> str:
    """A message's indexed text: ``text``, prefixed by a non-empty string ``metadata["speaker"]``.

    >>> search_text("I adopted a dog", {"speaker": "Caroline"})
    'Caroline: I adopted a dog'
    """
    speaker = (metadata or {}).get("speaker")
    if isinstance(speaker, str) and speaker.strip() and text:
        return f"{speaker.strip()}: {text}"
    return text


@dataclass(frozen=True)
class Message:
    """One message of a thread."""

    id: str
    thread_id: str
    resource_id: str | None
    role: Role
    content: MessageContent
    created_at: datetime
    type: str = "text"
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The plain text of the message."""
        return self.content.plain_text

    @property
    def search_text(self) -> str:
        """What semantic and lexical recall index: the text, after ``"<speaker>: "`` when
        ``metadata["speaker"]`` names who said it."""
        return search_text(self.text, self.metadata)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "thread_id": self.thread_id,
            "resource_id": self.resource_id,
            "role": self.role,
            "content": self.content.to_dict(),
            "created_at": _iso(self.created_at),
            "type": self.type,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        return cls(
            id=data["id"],
            thread_id=data["thread_id"],
            resource_id=data.get("resource_id"),
            role=data["role"],
            content=MessageContent.coerce(data.get("content")),
            created_at=parse_time(data["created_at"]),
            type=data.get("type") or "text",
            metadata=dict(data.get("metadata") or {}),
        )


@dataclass(frozen=True)
class Thread:
    """A conversation, owned by one resource (a user, an account...)."""

    id: str
    resource_id: str
    title: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "resource_id": self.resource_id,
            "title": self.title,
            "metadata": dict(self.metadata),
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Thread:
        return cls(
            id=data["id"],
            resource_id=data["resource_id"],
            title=data.get("title") or "",
            metadata=dict(data.get("metadata") or {}),
            created_at=parse_time(data.get("created_at")),
            updated_at=parse_time(data.get("updated_at")),
        )


@dataclass(frozen=True)
class Resource:
    """The owner of threads; holds resource-scoped working memory."""

    id: str
    working_memory: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    updated_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "working_memory": self.working_memory,
            "metadata": dict(self.metadata),
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Resource:
        return cls(
            id=data["id"],
            working_memory=data.get("working_memory"),
            metadata=dict(data.get("metadata") or {}),
            created_at=parse_time(data.get("created_at")),
            updated_at=parse_time(data.get("updated_at")),
        )


@dataclass(frozen=True)
class RecallResult:
    """What ``Memory.recall`` returns.

    ``scores`` maps the id of each message semantic recall found to its score (the cosine
    similarity in vector mode, the ranking score in lexical and hybrid modes); the neighbours
    it brought along and the history page have none.
    """

    messages: list[Message]
    total: int
    page: int
    per_page: int | bool
    has_more: bool
    usage: dict[str, int] | None = None
    scores: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "messages": [m.to_dict() for m in self.messages],
            "total": self.total,
            "page": self.page,
            "per_page": self.per_page,
            "has_more": self.has_more,
            "usage": self.usage,
            "scores": dict(self.scores),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RecallResult:
        """The inverse of ``to_dict`` (``scores`` may be absent).

        >>> r = RecallResult([], 0, 0, 10, False, scores={"m1": 0.5})
        >>> RecallResult.from_dict(r.to_dict()) == r
        True
        """
        return cls(
            messages=[Message.from_dict(m) for m in data.get("messages") or ()],
            total=data["total"],
            page=data["page"],
            per_page=data["per_page"],
            has_more=data["has_more"],
            usage=data.get("usage"),
            scores={str(k): float(v) for k, v in (data.get("scores") or {}).items()},
        )


@dataclass(frozen=True)
class ThreadPage:
    """A page of threads from ``Memory.list_threads``."""

    threads: list[Thread]
    total: int
    page: int
    per_page: int | bool
    has_more: bool


class _StoredMetadata:
    """The ``metadata`` field of a :class:`QueryResult`: a result built by a vector store may
    hold its metadata as the stored JSON (instance key ``_text``: a string, or its UTF-8
    bytes), decoded on first read, so a search pays no decoding for metadata nobody reads."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            raise AttributeError(self.name)  # no default: the field is required
        state = obj.__dict__
        try:
            return state[self.name]
        except KeyError:
            text = state.pop("_text")
            # Bytes are UTF-8: decoded as such, not sniffed for another encoding by json.
            value = state[self.name] = json.loads(text.decode() if type(text) is bytes else text)
            return value

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.name] = value


@dataclass(frozen=True)
class QueryResult:
    """One vector-search hit; ``score`` is larger when closer (cosine similarity).

    >>> QueryResult("a", 0.5, {"k": 1})
    QueryResult(id='a', score=0.5, metadata={'k': 1}, vector=None)
    """

    id: str
    score: float
    metadata: dict[str, Any] = _StoredMetadata()  # type: ignore[assignment]
    vector: Any = None


@dataclass(frozen=True)
class IndexStats:
    dimension: int
    metric: str
    count: int


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(value: Any) -> str:
    """Compact JSON used for every stored JSON column (written by the core; what only Python's
    encoder handles, such as ints beyond 64 bits or dict subclasses, goes to it). A value JSON
    cannot hold raises ``UnsupportedValueError`` naming its key, a lone surrogate
    ``InvalidArgumentError``.

    >>> dumps({"a": [1, "é"]})
    '{"a":[1,"é"]}'
    """
    text = _core.compact_json(value)
    if text is None:
        check_json(value, "value")
        text = _ENCODER.encode(value)
    return text


def check_json(value: Any, what: str) -> None:
    """Raise unless ``value`` is JSON that UTF-8 can store: ``None``, bools, numbers, strings,
    and lists, tuples and string-keyed dicts of them. ``what`` names the value in the error.

    >>> check_json({"tags": ["a", 1]}, "metadata")
    >>> check_json({"when": object()}, "metadata")
    Traceback (most recent call last):
    ...
    threadrecall.errors.UnsupportedValueError: metadata key 'when' holds a value of type object, which JSON cannot store
    """
    if _core.compact_json(value) is not None:  # the usual case, checked in the core
        return
    _walk_json(value, what, [], set())


def _walk_json(value: Any, what: str, path: list[Any], seen: set[int]) -> None:
    if value is None or isinstance(value, (bool, int, float)):
        return
    if isinstance(value, str):
        check_text(value, _where(what, path))
        return
    if isinstance(value, (Mapping, list, tuple)):
        if id(value) in seen:
            raise InvalidArgumentError(f"Circular reference detected: {_where(what, path)} holds itself")
        if len(path) > 500:
            raise InvalidArgumentError(f"{_where(what, path)} is nested more than 500 levels deep")
        seen.add(id(value))
        items = value.items() if isinstance(value, Mapping) else enumerate(value)
        for key, item in items:
            if isinstance(value, Mapping):
                if not isinstance(key, str):
                    raise UnsupportedValueError(
                        f"{_where(what, path)} has the key {key!r}: JSON keys must be strings")
                check_text(key, f"a key of {_where(what, path)}")
            _walk_json(item, what, [*path, key], seen)
        seen.discard(id(value))
        return
    raise UnsupportedValueError(
        f"{_where(what, path)} holds a value of type {type(value).__name__}, which JSON "
        "cannot store")


def _where(what: str, path: list[Any]) -> str:
    if not path:
        return what
    head = f"{what}[{path[0]}]" if isinstance(path[0], int) else f"{what} key {path[0]!r}"
    return head + "".join(f"[{k!r}]" for k in path[1:])


def check_texts(value: Any, what: str) -> None:
    """Raise ``InvalidArgumentError`` if a string anywhere in ``value`` (a key, a value, an item)
    holds a lone surrogate; other values are left to the caller's own checks.

    >>> check_texts({"k": ["ok", 1, object()]}, "filter")
    """
    if _core.compact_json(value) is not None:
        return
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            check_text(item, what)
        elif isinstance(item, Mapping):
            stack.extend(k for k in item if isinstance(k, str))
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)) and len(stack) < 100_000:
            stack.extend(item)


def check_text(value: str, what: str) -> str:
    """Return ``value`` if UTF-8 can store it; a lone surrogate raises ``InvalidArgumentError``.

    >>> check_text("caf\u00e9", "title")
    'café'
    """
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(
                f"{what} holds a lone surrogate ({value[exc.start]!a} at {exc.start}), which "
                "UTF-8 cannot store") from None
    return value


def check_name(value: str, what: str) -> str:
    """``check_text`` for an identifier or a title, which must also be free of NUL characters:
    PostgreSQL's text cannot hold one, so no backend takes one.

    >>> check_name("t\\0", "threadId")
    Traceback (most recent call last):
    ...
    threadrecall.errors.InvalidArgumentError: threadId cannot contain a NUL character
    """
    if "\0" in value:
        raise InvalidArgumentError(f"{what} cannot contain a NUL character")
    return check_text(value, what)
