"""``MessageHistory``: the thread's last messages before the input; the turn saved after it."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..memory import Memory
from ..recall import HistoryQuery, read_history
from ..storage.duckdb import DuckDBStorage
from ..types import Message

__all__ = ["MessageHistory"]


class MessageHistory:
    """Prepends the newest ``last_messages`` of the thread (oldest first) to the input."""

    id = "message-history"
    name = "MessageHistory"

    def __init__(self, storage: DuckDBStorage, *, last_messages: int = 10) -> None:
        self.storage = storage
        self.last_messages = last_messages

    def process_input(self, messages: Sequence[Message], *, thread_id: str | None,
                      resource_id: str | None = None) -> list[Message]:
        given = list(messages)
        if not thread_id or not self.last_messages:
            return given
        query = HistoryQuery(thread_id=thread_id, resource_id=resource_id, per_page=self.last_messages,
                             page=0, date_range=None, metadata=None, order_by=None)
        present = {m.id for m in given}
        history = [m for m in read_history(self.storage, query, []).messages if m.id not in present]
        return history + given

    def process_output_result(self, messages: Sequence[Message | Mapping[str, Any]], *,
                              thread_id: str | None, resource_id: str | None = None) -> list[Message]:
        """Save the turn's messages (those not recalled from memory) to the thread."""
        given = list(messages)
        if thread_id:
            fresh = [m for m in given if _source(m) != "memory"]
            Memory(storage=self.storage).save_messages(
                [_with_thread(m, thread_id, resource_id) for m in fresh])
        return given


def _source(message: Message | Mapping[str, Any]) -> Any:
    meta = message.metadata if isinstance(message, Message) else (message.get("metadata") or {})
    return meta.get("source")


def _with_thread(message: Message | Mapping[str, Any], thread_id: str, resource_id: str | None) -> dict[str, Any]:
    data = message.to_dict() if isinstance(message, Message) else dict(message)
    data.setdefault("thread_id", thread_id)
    if resource_id and not data.get("resource_id"):
        data["resource_id"] = resource_id
    return data
