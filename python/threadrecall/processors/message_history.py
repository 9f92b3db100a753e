"""``MessageHistory``: the thread's last messages before the input; the turn saved after it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..incoming import incoming_message
from ..memory import Memory, async_twin
from ..recall import HistoryQuery, read_history
from ..storage.base import Storage
from ..types import Message

__all__ = ["MessageHistory"]


class MessageHistory:
    """Prepends the newest ``last_messages`` of the thread (oldest first) to the input.

    Args:
        storage: where the thread's messages are read and the turn saved.
        last_messages: how many of the newest messages come before the input (0: none).

    >>> from threadrecall.storage import DuckDBStorage
    >>> history = MessageHistory(DuckDBStorage(), last_messages=1)
    >>> _ = history.process_output_result([{"role": "user", "content": "Hi"},
    ...     {"role": "assistant", "content": "Hello!"}], thread_id="t1", resource_id="u")
    >>> [m.text for m in history.process_input([{"role": "user", "content": "Bye"}], thread_id="t1")]
    ['Hello!', 'Bye']
    """

    id = "message-history"
    name = "MessageHistory"

    def __init__(self, storage: Storage, *, last_messages: int = 10) -> None:
        self.storage = storage
        self.last_messages = last_messages

    def process_input(self, messages: Sequence[Message], *, thread_id: str | None,
                      resource_id: str | None = None) -> list[Message]:
        """The thread's newest messages, then ``messages`` (dicts or ``Message``s).

        Args:
            messages: the turn's input.
            thread_id: the thread to read (``None``: the input is returned as it is).
            resource_id: the owner, given to input messages that name none.
        """
        if not thread_id:
            return list(messages)
        given = [incoming_message(m, thread_id=thread_id, resource_id=resource_id) for m in messages]
        if not self.last_messages:
            return given
        query = HistoryQuery(thread_id=thread_id, resource_id=resource_id, per_page=self.last_messages,
                             page=0, date_range=None, metadata=None, order_by=None)
        present = {m.id for m in given}
        history = [m for m in read_history(self.storage, query, []).messages if m.id not in present]
        return history + given

    def process_output_result(self, messages: Sequence[Message | Mapping[str, Any]], *,
                              thread_id: str | None, resource_id: str | None = None) -> list[Message]:
        """Save the turn's messages (those not recalled from memory) to the thread.

        Args:
            messages: the turn's messages.
            thread_id: the thread to save to (created when missing and ``resource_id`` given).
            resource_id: the owner, given to messages that name none.
        """
        if not thread_id:  # returned as given: dicts stay dicts
            return list(messages)  # type: ignore[arg-type]
        given = [incoming_message(m, thread_id=thread_id, resource_id=resource_id) for m in messages]
        Memory(storage=self.storage).save_messages([m for m in given if m.metadata.get("source") != "memory"])
        return given

    aprocess_input = async_twin(process_input)
    aprocess_output_result = async_twin(process_output_result)
