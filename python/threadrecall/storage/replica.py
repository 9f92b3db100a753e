"""The in-memory replica of a backend's messages, which makes recall fast.

It holds the Rust core's ``Timeline`` (every message by thread in ``(created_at, seq)`` order:
pages, cursors, context windows and neighbour walks in microseconds) and, from its first
lexical or hybrid recall on, the BM25 ``LexicalIndex`` of message search text. It is a cache:
it holds only committed state, is fed with each commit's writes (by its own backend, or from
any backend's change feed with ``catch_up``) and can be rebuilt from the backend at any time.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from .. import _core
from ..errors import InvalidArgumentError
from ..types import Message, MessageContent, search_text
from .base import Changes, Storage
from .rows import MessageRow, to_micros

__all__ = ["Replica"]


class Replica:
    """The messages of one backend, in memory.

    >>> replica = Replica()
    >>> replica.upsert_rows([("m1", "t1", "r1", 0, 1, '{"metadata": {}}')])
    >>> replica.timeline.get("m1")[0]
    'm1'
    """

    def __init__(self) -> None:
        self.timeline = _core.Timeline()
        self.position = 0  # the change-feed position this replica reflects (``catch_up``)
        self._lexical: _core.LexicalIndex | None = None
        self._lock = threading.Lock()

    # ----------------------------------------------------------------------------- writes

    def upsert(self, messages: Sequence[Message], seqs: Sequence[int], payloads: Sequence[str]) -> None:
        """Mirror committed messages (``payloads[i]`` is the row body of ``messages[i]``)."""
        ids = [m.id for m in messages]
        threads = [m.thread_id for m in messages]
        resources = [m.resource_id for m in messages]
        micros = [to_micros(m.created_at) for m in messages]
        self.timeline.upsert(ids, threads, resources, micros, list(seqs), [m.metadata for m in messages],
                             list(payloads))
        if self._lexical is not None:
            self._lexical.upsert(ids, threads, resources, [m.search_text for m in messages], micros)

    def upsert_rows(self, rows: Sequence[MessageRow], metadata_json: Sequence[str] | None = None) -> None:
        """Mirror committed rows; ``metadata_json[i]``, when given, is row ``i``'s metadata as
        stored (it saves decoding the bodies)."""
        if not rows:
            return
        ids, threads, resources, micros, seqs, payloads = (list(c) for c in zip(*rows))
        bodies = None
        if metadata_json is None:
            bodies = [json.loads(p) for p in payloads]
            metadata: list[Any] | None = [b["metadata"] for b in bodies]
        else:
            metadata = None
        try:  # the stored JSON texts, parsed in the core
            self.timeline.upsert(ids, threads, resources, micros, seqs, metadata, payloads,
                                 metadata_json=None if metadata_json is None else list(metadata_json))
        except InvalidArgumentError:  # NaN or infinities, which only Python's JSON reads
            self.timeline.upsert(ids, threads, resources, micros, seqs,
                                 [json.loads(m) for m in metadata_json or ()], payloads)
        if self._lexical is not None:
            bodies = bodies or [json.loads(p) for p in payloads]
            self._lexical.upsert(ids, threads, resources, [_search_text(b) for b in bodies], micros)

    def remove(self, ids: list[str]) -> None:
        self.timeline.remove(ids)
        if self._lexical is not None:
            self._lexical.remove(ids)

    def remove_thread(self, thread_id: str) -> None:
        self.timeline.remove_thread(thread_id)
        if self._lexical is not None:
            self._lexical.remove_thread(thread_id)

    def apply(self, changes: Changes) -> None:
        """Apply one stretch of a change feed (a ``reset`` must be handled by the caller)."""
        for thread_id in changes.deleted_threads:
            self.remove_thread(thread_id)
        if changes.deleted:
            self.remove(list(changes.deleted))
        self.upsert_rows(changes.upserted)
        self.position = changes.position

    def catch_up(self, storage: Storage) -> None:
        """Bring the replica up to date with ``storage``'s change feed (rebuilt from a scan
        when the feed no longer reaches back to the replica's position)."""
        with self._lock:
            changes = storage.changes_since(self.position)
            if changes.reset:
                self.timeline = _core.Timeline()
                lexical, self._lexical = self._lexical is not None, None
                for rows in storage.scan_messages():
                    self.upsert_rows(rows)
                if lexical:
                    self._lexical = _lexical_of(storage.scan_messages())
                changes = Changes(changes.position)
            self.apply(changes)

    # ----------------------------------------------------------------------------- lexical index

    def lexical(self, rows: Callable[[], Iterable[Sequence[MessageRow]]],
                writers_held: Callable[[], AbstractContextManager[Any]]) -> _core.LexicalIndex:
        """The BM25 index of message search text, built from ``rows()`` on the first call while
        ``writers_held()`` keeps commits out, and kept up to date with every write from then on."""
        if self._lexical is None:
            with writers_held():  # serialised with writers: no commit lands meanwhile
                if self._lexical is None:
                    self._lexical = _lexical_of(rows())
        return self._lexical

    @property
    def has_lexical(self) -> bool:
        return self._lexical is not None


def _lexical_of(batches: Iterable[Sequence[MessageRow]]) -> _core.LexicalIndex:
    index = _core.LexicalIndex()
    for rows in batches:
        if rows:
            ids, threads, resources, micros, _seqs, payloads = (list(c) for c in zip(*rows))
            texts = [_search_text(json.loads(p)) for p in payloads]
            index.upsert(ids, threads, resources, texts, micros)
    return index


def _search_text(body: dict[str, Any]) -> str:
    return search_text(MessageContent.coerce(body.get("content")).plain_text, body.get("metadata") or {})
