"""Python values as ``PostgresStorage``'s statement parameters, and its rows back as values.

Messages travel as one JSON array of rows, threads as parallel arrays (one per column,
unnested by the statement); JSON columns as the exact text they are stored as.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from ...errors import InvalidArgumentError
from ...types import Message, Thread, dumps, to_utc
from ..rows import from_micros, to_micros
from .containment import filter_form

__all__ = ["as_stored", "checked_count", "json_text", "message_params", "thread_of", "thread_params", "utc_now"]

_ASCII = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True, default=str)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def json_text(value: Any) -> str:
    """The stored JSON text of a value; unpaired surrogates, which PostgreSQL's UTF-8 text
    cannot hold, are written as escapes (read back as the same string)."""
    text = dumps(value)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = _ASCII.encode(value)
    return text


def message_params(messages: Sequence[Message]) -> dict[str, Any]:
    """The parameters of a message upsert: the rows as one JSON array (one text to send, where
    an array per column costs a conversion each), their times, the time now and the threads."""
    times = [to_micros(m.created_at) for m in messages]
    rows = [[m.id, m.thread_id, m.resource_id, m.role, m.type, json_text(m.content.to_dict()),
             json_text(m.metadata), filter_form(m.metadata), t] for m, t in zip(messages, times)]
    return {"rows": json.dumps(rows), "times": times, "now": utc_now(),
            "touched": sorted({m.thread_id for m in messages})}


def as_stored(messages: Sequence[Message], times: Sequence[int], kept: Mapping[str, int]) -> list[Message]:
    """The messages with the ``created_at`` kept by those they replaced."""
    return [m if kept[m.id] == times[i] else replace(m, created_at=from_micros(kept[m.id]))
            for i, m in enumerate(messages)]


def thread_of(row: Sequence[Any]) -> Thread:
    return Thread(id=row[0], resource_id=row[1], title=row[2], metadata=json.loads(row[3]),
                  created_at=to_utc(row[4]), updated_at=to_utc(row[5]))


def thread_params(threads: Sequence[Thread]) -> dict[str, Any]:
    now = utc_now()
    return {
        "ids": [t.id for t in threads],
        "resources": [t.resource_id for t in threads],
        "titles": [t.title or "" for t in threads],
        "metadatas": [json_text(t.metadata or {}) for t in threads],
        "filters": [filter_form(t.metadata, exact_integers=True) for t in threads],
        "created": [t.created_at or now for t in threads],
        "updated": [t.updated_at or now for t in threads],
    }


def checked_count(name: str, value: Any) -> int:
    """A non-negative int, checked with the core's message."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
    if value < 0:
        raise InvalidArgumentError(f"{name} must be >= 0")
    return value
