"""The thread of every message of a save: created when missing and the message names a
resource, else the save fails before it writes anything.

``save_turn`` is the generic form of ``Storage.save_turn`` (backends with a faster way, such
as one SQL statement, implement it themselves with the same rules).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import ThreadNotFoundError
from ..types import Message, Thread

if TYPE_CHECKING:
    from .base import Storage

__all__ = ["ensure_threads", "missing_thread", "owned", "save_turn"]


def missing_thread(thread_id: str) -> ThreadNotFoundError:
    return ThreadNotFoundError(
        f"Thread with id {thread_id} not found; create it first or give the message a resource_id")


def ensure_threads(storage: Storage, messages: Sequence[Message]) -> dict[str, Thread]:
    """The thread of every message; a missing one is created with the resource of its first
    message, which must name one."""
    threads = storage.get_threads(m.thread_id for m in messages)
    missing: dict[str, Thread] = {}
    for m in messages:
        if m.thread_id in threads or m.thread_id in missing:
            continue
        if m.resource_id is None:
            raise missing_thread(m.thread_id)
        missing[m.thread_id] = Thread(id=m.thread_id, resource_id=m.resource_id)
    threads.update(storage.create_threads(list(missing.values())))
    return threads


def owned(messages: Sequence[Message], threads: dict[str, Thread]) -> list[Message]:
    """The messages, each without a resource given the resource of its thread."""
    return [m if m.resource_id is not None else Message(
        m.id, m.thread_id, threads[m.thread_id].resource_id, m.role, m.content, m.created_at, m.type,
        m.metadata) for m in messages]  # not replace(): several times slower


def save_turn(storage: Storage, messages: Sequence[Message]) -> tuple[list[Message], dict[str, Thread]]:
    """Save ``messages`` with their threads in one transaction; returns them as stored and
    their threads by id."""
    with storage.transaction():
        threads = ensure_threads(storage, messages)
        return storage.save_messages(owned(messages, threads)), threads
