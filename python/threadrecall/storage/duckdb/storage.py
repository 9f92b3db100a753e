"""DuckDB storage of threads, messages and resources: the source of truth, for one process.

DuckDB admits one writing process per file: a second process gets ``ConfigurationError``
(use ``PostgresStorage`` to share a memory between processes). Within a process, every
``DuckDBStorage`` of one path is the same object, so all of its users see one database.

Messages are also mirrored, after each commit, into a ``Replica`` (the Rust core's
``Timeline``, and the BM25 ``LexicalIndex`` from its first use) that serves ``recall`` in
microseconds without a query. DuckDB is written first, inside one transaction per call; the
replica follows only what committed, and is rebuilt from the database when a store is opened.
Each commit is also kept in a short in-memory change feed for other consumers.

A save of new messages sets their thread's ``updated_at`` without a statement of its own: each
message row records the time it touched its thread (``saved_at``), the storage keeps the
threads whose row lags behind in memory and folds them into the ``threads`` table before it
lists threads and when it closes, and opening a database folds what a process that stopped
before that left in ``saved_at``. ``folded_seq`` on a thread is the message ``seq`` up to which
its row is current, so a later write of the thread itself is never overridden by an older
message. A one-message save is then one statement, which DuckDB commits alone.
"""

from __future__ import annotations

import collections
import itertools
import json
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ...errors import ThreadNotFoundError
from ...types import Message, Resource, Thread, ThreadPage, dumps, to_utc
from ..base import Changes
from ..replica import Replica
from ..rows import MessageRow, from_micros, message_of, messages_of, new_id, payload, to_micros
from ..thread_cache import ThreadCache
from ..thread_filter import thread_filter_sql, validate_thread_filter
from ..thread_listing import check_thread_paging, thread_order
from ..thread_owners import save_turn
from .database import Database
from .schema import (
    FOLD_TOUCHES,
    MESSAGE_VALUES,
    MIGRATIONS,
    PAYLOAD_SQL,
    RECOVER_TOUCHES,
    THREAD_VALUES,
    UPSERT_MESSAGES,
    UPSERT_THREADS,
    VALUES_ROWS,
    message_table,
    thread_of,
    thread_table,
)

__all__ = ["DuckDBStorage", "MessageRow", "from_micros", "message_of", "messages_of", "new_id", "to_micros"]

# Commits kept in the in-memory change feed; a consumer further behind rebuilds from a scan.
FEED_COMMITS = 1024

# File-backed stores of this process, by resolved path (one nobody holds any more drops out).
_OPEN: weakref.WeakValueDictionary[str, DuckDBStorage] = weakref.WeakValueDictionary()
_OPEN_LOCK = threading.Lock()


def _now() -> datetime:
    return datetime.now(timezone.utc)


class DuckDBStorage:
    """Threads, messages and resources in a DuckDB file (or ``:memory:``).

    >>> storage = DuckDBStorage()
    >>> storage.save_thread(Thread(id="t1", resource_id="r1")).title
    ''
    """

    _opens: int  # set by ``__new__``: one storage per file, shared by every open of it

    def __new__(cls, path: str | Path = ":memory:") -> DuckDBStorage:
        key = _key(path)
        with _OPEN_LOCK:
            store = _OPEN.get(key) if key is not None else None
            if store is None:
                store = super().__new__(cls)
                store._opens = 0
                if key is not None:
                    _OPEN[key] = store
            store._opens += 1
            return store

    def __init__(self, path: str | Path = ":memory:") -> None:
        if hasattr(self, "db"):  # this path is already open in this process: share it
            return
        self._key = _key(path)
        try:
            db = Database(path)
            db.migrate("memory", MIGRATIONS)
            with db.transaction() as tx:
                tx.execute(RECOVER_TOUCHES)
        except BaseException:
            self._forget()
            raise
        self.db = db
        self.replica = Replica()
        self._threads = ThreadCache()
        # Every committed thread's resource: an owner check needs no query, nor a lookup of another id.
        self._owners: dict[str, str] = {}
        self._seq = 0
        self._unsaved: set[str] = set()  # message ids written by the open transaction
        self._lagging: dict[str, datetime] = {}  # committed touches not yet in the threads table
        self._feed: collections.deque[Changes] = collections.deque(maxlen=FEED_COMMITS)
        self._position = 0
        with db.all_threads():
            self._load_replica()

    @property
    def path(self) -> str:
        return self.db.path

    @property
    def timeline(self) -> Any:
        """The replica's ``_core.Timeline``."""
        return self.replica.timeline

    def close(self) -> None:
        """Close this user's handle; the database closes with the last one (its lagging
        thread touches folded in first)."""
        if self._forget():
            try:
                self._fold_touches()
            finally:
                self.db.close()

    def _forget(self) -> bool:
        """Drop one user; True when it was the last (then the path is free to reopen)."""
        with _OPEN_LOCK:
            self._opens -= 1
            if self._opens > 0:
                return False
            if self._key is not None and _OPEN.get(self._key) is self:
                del _OPEN[self._key]
            return True

    def transaction(self, *, lock: str | None = None) -> Any:
        """A context in which every write commits together or not at all (nested calls join
        the outermost one). DuckDB serialises all write transactions, so ``lock`` adds nothing."""
        return self.db.transaction()

    def on_commit(self, callback: Any) -> None:
        self.db.on_commit(callback)

    def grouped(self, job: Any) -> Any:
        """Run ``job`` (writes through this store, safe to run again) in a transaction shared
        with the writes waiting at the same time; returns once it has committed
        (``Database.grouped``)."""
        return self.db.grouped(job)

    # ----------------------------------------------------------------------------- threads

    def get_thread(self, thread_id: str) -> Thread | None:
        return self.get_threads([thread_id]).get(thread_id)

    def get_threads(self, thread_ids: Iterable[str]) -> dict[str, Thread]:
        """The existing threads among ``thread_ids``, by id (cached, else one query)."""
        wanted = list(dict.fromkeys(thread_ids))
        found = self._threads.get_many(wanted)
        if written := self._written_threads():  # newer than the cache's committed versions
            found.update((i, written[i]) for i in wanted if i in written)
        absent = self._absent_threads()
        saved = self._saved_thread_ids()
        missing = [i for i in wanted if i not in found and i not in absent
                   and (i in self._owners or i in saved)]
        if missing:
            # One id (an ownership check) by equality: DuckDB plans it as a point lookup,
            # about a third cheaper than the list's semi-join.
            one = len(missing) == 1
            rows = self.db.cursor().execute(
                "SELECT id, resource_id, title, metadata, created_at, updated_at FROM threads "
                + ("WHERE id = ?" if one else "WHERE id IN (SELECT unnest(?))"),
                [missing[0] if one else missing],
            ).fetchall()
            loaded = [self._current(thread_of(row), saved) for row in rows]
            if not self.db.in_transaction:
                self._threads.put(loaded)
            found.update((t.id, t) for t in loaded)
            if self.db.in_transaction:
                absent.update(i for i in missing if i not in found)
        return found

    def owner(self, thread_id: str) -> str | None:
        """The resource of thread ``thread_id`` (``None`` when there is no such thread): the
        committed one without a query, or as the open transaction sees it."""
        if self.db.in_transaction:
            thread = self.get_thread(thread_id)
            return None if thread is None else thread.resource_id
        return self._owners.get(thread_id)

    def save_thread(self, thread: Thread) -> Thread:
        """Insert or replace a thread (an existing thread keeps its ``created_at``)."""
        return self.save_threads([thread])[thread.id]

    def save_threads(self, threads: Sequence[Thread]) -> dict[str, Thread]:
        """Insert or replace threads; returns them as stored, by id. An existing thread keeps
        its ``created_at``; a few threads take a point update or a plain insert each, which
        DuckDB runs far cheaper than an upsert."""
        if not threads:
            return {}
        latest = {t.id: t for t in threads}
        if len(latest) > VALUES_ROWS:
            return self._upsert_threads(list(latest.values()))
        now = _now()
        with self.db.transaction() as tx:
            existing = self.get_threads(latest)
            stored: dict[str, Thread] = {}
            fresh = []
            for t in latest.values():
                metadata = dumps(t.metadata or {})
                old = existing.get(t.id)
                created = old.created_at if old is not None else t.created_at or now
                stored[t.id] = Thread(t.id, t.resource_id, t.title or "", json.loads(metadata), created,
                                      t.updated_at or now)
                if old is not None:
                    tx.execute("UPDATE threads SET resource_id = ?, title = ?, metadata = ?, updated_at = ?, "
                               "folded_seq = ? WHERE id = ?",
                               [t.resource_id, t.title or "", metadata, t.updated_at or now, self._seq, t.id])
                else:
                    fresh.append(stored[t.id])
            if fresh:
                self._insert_threads(tx, fresh)
            self._saved_threads(stored, {t.id for t in latest.values() if t.updated_at is None})
        return stored

    def _upsert_threads(self, threads: list[Thread]) -> dict[str, Thread]:
        with self.db.transaction() as tx:
            tx.register("incoming_threads", thread_table(threads, _now(), self._seq))
            try:
                rows = tx.execute(UPSERT_THREADS).fetchall()
            finally:
                tx.unregister("incoming_threads")
            stored = {row[0]: thread_of(row) for row in rows}
            self._saved_threads(stored, {t.id for t in threads if t.updated_at is None})
        return stored

    def _saved_threads(self, stored: dict[str, Thread], now: set[str]) -> None:
        """Record threads the open transaction saved: the cache gets them once it commits, and
        those saved as of now need no touch from messages saved to them in the same transaction."""
        self._forget_threads(stored)
        self._written_threads().update((i, t) for i, t in stored.items() if i in now)
        self._saved_thread_ids().update(stored)
        self.db.on_commit(lambda: self._committed_threads(stored.values()))

    def _insert_threads(self, tx: Any, threads: Sequence[Thread]) -> None:
        """A plain insert of complete threads (every field set)."""
        if len(threads) <= VALUES_ROWS:
            params = [v for t in threads for v in (
                t.id, t.resource_id, t.title, dumps(t.metadata), t.created_at, t.updated_at, self._seq)]
            # Ids the mirror of thread ids has not seen: only a missing value could make it fail.
            self.db.defer_rows("threads", THREAD_VALUES, params, journal=all(
                isinstance(v, str) for t in threads for v in (t.id, t.resource_id, t.title))
                and all(isinstance(t.created_at, datetime) and isinstance(t.updated_at, datetime)
                        for t in threads))
            return
        tx.register("incoming_threads", thread_table(threads, _now(), self._seq))
        try:
            tx.execute("INSERT INTO threads SELECT * FROM incoming_threads")
        finally:
            tx.unregister("incoming_threads")

    def create_threads(self, threads: Sequence[Thread]) -> dict[str, Thread]:
        """Insert threads the caller found missing in its open transaction: a plain insert, far
        cheaper than ``save_threads``' upsert. Messages saved to them in the same transaction
        leave them as created (``updated_at`` is already now)."""
        if not threads:
            return {}
        now = _now()
        made = {t.id: Thread(t.id, t.resource_id, t.title or "", t.metadata or {},
                             t.created_at or now, t.updated_at or now) for t in threads}
        with self.db.transaction() as tx:
            self._insert_threads(tx, list(made.values()))
            self._absent_threads().difference_update(made)
            self._written_threads().update(made)
            self._saved_thread_ids().update(made)
            self.db.on_commit(lambda: self._committed_threads(made.values()))
        return made

    def update_thread(self, thread_id: str, *, title: str | None = None,
                      metadata: Mapping[str, Any] | None = None) -> Thread:
        """Set the title (when given) and shallow-merge ``metadata`` into the thread's."""
        with self.db.transaction():
            thread = self.get_thread(thread_id)
            if thread is None:
                raise ThreadNotFoundError(f"Thread with id {thread_id} not found")
            merged = {**thread.metadata, **(metadata or {})}
            return self.save_thread(replace(
                thread, title=thread.title if title is None else title, metadata=merged,
                updated_at=_now(),
            ))

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread and its messages (a missing thread is not an error)."""
        with self.db.transaction() as tx:
            self.db.scratch["messages_written"] = self.db.scratch["messages_deleted"] = True
            tx.execute("DELETE FROM messages WHERE thread_id = ?", [thread_id])
            tx.execute("DELETE FROM threads WHERE id = ?", [thread_id])
            self._forget_threads([thread_id])
            self.db.on_commit(lambda: self._unmirror_thread(thread_id))
            self.db.on_commit(lambda: self._owners.pop(thread_id, None))

    def list_threads(self, *, resource_id: str | None = None, metadata: Any = None, page: int = 0,
                     per_page: int | bool = 100, order_by: Mapping[str, str] | None = None) -> ThreadPage:
        check_thread_paging(page, per_page)
        field, direction = thread_order(order_by)
        self._fold_touches()  # the threads table, as of now
        where, params = thread_filter_sql(validate_thread_filter(metadata))
        if resource_id is not None:
            where += " AND resource_id = ?"
            params.append(resource_id)
        cur = self.db.cursor()
        total = cur.execute(f"SELECT count(*) FROM threads WHERE {where}", params).fetchall()[0][0]
        if per_page is not False and per_page == 0:
            return ThreadPage([], total, page, 0, False)
        limit = total if per_page is False else per_page
        offset = 0 if per_page is False else page * per_page
        rows = cur.execute(
            f"SELECT id, resource_id, title, metadata, created_at, updated_at FROM threads "
            f"WHERE {where} ORDER BY {field} {direction}, id {direction} LIMIT ? OFFSET ?",
            [*params, limit, offset],
        ).fetchall()
        has_more = per_page is not False and offset + per_page < total
        return ThreadPage([thread_of(r) for r in rows], total, page, per_page, has_more)

    # ----------------------------------------------------------------------------- resources

    def get_resource(self, resource_id: str) -> Resource | None:
        row = self.db.fetch_one(
            "SELECT id, working_memory, metadata, created_at, updated_at FROM resources WHERE id = ?",
            [resource_id],
        )
        if row is None:
            return None
        return Resource(row[0], row[1], json.loads(row[2]), to_utc(row[3]), to_utc(row[4]))

    def update_resource(self, resource_id: str, *, working_memory: str | None = None,
                        metadata: Mapping[str, Any] | None = None) -> Resource:
        """Create or update a resource: working memory replaced when given, metadata merged."""
        now = _now()
        with self.db.transaction() as tx:
            old = self.get_resource(resource_id)
            if old is None:
                old = Resource(resource_id, None, {}, now, now)
            new = replace(
                old,
                working_memory=old.working_memory if working_memory is None else working_memory,
                metadata={**old.metadata, **(metadata or {})},
                updated_at=now,
            )
            tx.execute(
                "INSERT OR REPLACE INTO resources VALUES (?, ?, ?, ?, ?)",
                [new.id, new.working_memory, dumps(new.metadata), new.created_at, new.updated_at],
            )
        return new

    # ----------------------------------------------------------------------------- messages

    def get_message(self, message_id: str) -> Message | None:
        row = self._view(ids=[message_id]).get(message_id)
        return message_of(row) if row else None

    def get_messages(self, message_ids: Iterable[str]) -> list[Message]:
        wanted = list(message_ids)
        view = self._view(ids=wanted)
        return [message_of(row) for i in wanted if (row := view.get(i))]

    def page(self, thread_id: str, **query: Any) -> tuple[list[MessageRow], int]:
        return self._view(threads=[thread_id]).page(thread_id, **query)

    def window(self, includes: Sequence[tuple[str, int, int]],
               resource_id: str | None = None) -> list[MessageRow]:
        view = self._view(threads_of=[i[0] for i in includes])
        return view.window(list(includes), resource_id)

    def thread_messages(self, thread_id: str) -> list[Message]:
        """Every message of a thread, oldest first."""
        rows, _ = self._view(threads=[thread_id]).page(thread_id)
        return [message_of(r) for r in rows]

    def _view(self, *, ids: Sequence[str] = (), threads: Sequence[str] = (),
              threads_of: Sequence[str] = ()) -> Any:
        """The timeline that reads see: the replica's, or inside a transaction that has written
        messages, one holding the transaction's own view of the messages asked about (given
        ids, whole threads, or the whole threads of given ids), read from the database.
        Until the transaction deletes a message, the replica still answers for the ids and
        threads it has not written."""
        if not (self.db.in_transaction and self.db.scratch.get("messages_written")) or not (
                ids or threads or threads_of):
            return self.timeline
        if not self.db.scratch.get("messages_deleted") and (
                (ids and self._unsaved.isdisjoint(ids)) or
                (threads and self.db.scratch["message_threads"].isdisjoint(threads))):
            return self.timeline
        view = Replica()
        where = ("id IN (SELECT unnest(?))" if ids else
                 "thread_id IN (SELECT unnest(?))" if threads else
                 "thread_id IN (SELECT thread_id FROM messages WHERE id IN (SELECT unnest(?)))")
        rows = self.db.cursor().execute(
            f"SELECT id, thread_id, resource_id, epoch_us(created_at), seq, {PAYLOAD_SQL}, metadata "
            f"FROM messages WHERE {where}", [list(ids or threads or threads_of)]).fetchall()
        view.upsert_rows([r[:6] for r in rows], metadata_json=[r[6] for r in rows])
        return view.timeline

    def save_messages(self, messages: Sequence[Message]) -> list[Message]:
        """Upsert complete messages by id in one transaction.

        An existing message keeps its ``created_at`` and insertion order; every thread touched
        gets ``updated_at = now``. A batch that repeats an id keeps the last occurrence.
        """
        if not messages:
            return []
        latest = {m.id: m for m in messages}
        with self.db.transaction() as tx:
            stored: list[Message] = []
            seqs: list[int] = []
            # Ids new to the database take a plain insert, far cheaper than an upsert: the mirror
            # knows the committed ids, `_unsaved` those of the open transaction.
            replacing = not self._unsaved.isdisjoint(latest)
            view = self._view(ids=list(latest))
            self._unsaved.update(latest)
            self.db.on_commit(self._unsaved.clear)
            self.db.scratch["messages_written"] = True
            written = self.db.scratch.setdefault("message_threads", set())  # before and after
            for m in latest.values():
                existing = view.get(m.id)
                written.add(m.thread_id)
                if existing is None:
                    self._seq += 1
                    seqs.append(self._seq)
                    stored.append(m)
                else:
                    replacing = True
                    written.add(existing[1])
                    seqs.append(existing[4])
                    stored.append(replace(m, created_at=from_micros(existing[3])))
            contents = [dumps(m.content.to_dict()) for m in stored]
            metadatas = [dumps(m.metadata) for m in stored]
            now = _now()
            # New messages touch their threads through their own rows (``saved_at``); replacing
            # ones, whose rows keep their place, by a statement.
            touched = set() if replacing else self._touch_lagging({m.thread_id for m in stored}, now)
            saved_at = [now if m.thread_id in touched else None for m in stored]
            sql = UPSERT_MESSAGES if replacing else "INSERT INTO messages SELECT * FROM incoming"
            if len(stored) <= VALUES_ROWS:  # a turn's few messages: bound values, no Arrow scan
                params = [v for m, seq, c, md, at in zip(stored, seqs, contents, metadatas, saved_at) for v in (
                    m.id, m.thread_id, m.resource_id, m.role, m.type, c, md, to_utc(m.created_at),
                    seq, at)]
                if replacing:
                    values = "VALUES " + ", ".join([MESSAGE_VALUES] * len(stored))
                    self.db.defer(sql.replace("SELECT * FROM incoming", values), params)
                else:  # new ids (the mirror's word): only a missing value could make it fail
                    self.db.defer_rows("messages", MESSAGE_VALUES, params, journal=all(
                        isinstance(m.id, str) and isinstance(m.thread_id, str) and isinstance(m.role, str)
                        and isinstance(m.type, str) and isinstance(m.resource_id, (str, type(None)))
                        for m in stored))
            else:
                tx.register("incoming", message_table(stored, seqs, contents, metadatas, saved_at))
                try:
                    tx.execute(sql)
                finally:
                    tx.unregister("incoming")
            if replacing:
                self._touch_threads(tx, {m.thread_id for m in stored})
            payloads = [payload(m.role, m.type, c, md) for m, c, md in zip(stored, contents, metadatas)]
            self.db.on_commit(lambda: self._mirror(stored, seqs, payloads))
        return stored

    def save_turn(self, messages: Sequence[Message]) -> tuple[list[Message], dict[str, Thread]]:
        """Save messages with their threads in one transaction (``Storage.save_turn``)."""
        return save_turn(self, messages)

    def delete_messages(self, ids: Iterable[str]) -> list[str]:
        """Delete messages by id; unknown ids are ignored. Returns the ids that existed."""
        wanted = list(dict.fromkeys(ids))
        view = self._view(ids=wanted)
        found = [(i, row[1]) for i in wanted if (row := view.get(i))]
        if not found:
            return []
        gone = [i for i, _ in found]
        with self.db.transaction() as tx:
            self.db.scratch["messages_written"] = self.db.scratch["messages_deleted"] = True
            tx.execute("DELETE FROM messages WHERE id IN (SELECT unnest(?))", [gone])
            self._touch_threads(tx, {t for _, t in found})
            self.db.on_commit(lambda: self._unmirror(gone))
        return gone

    # ----------------------------------------------------------------------------- replica and feed

    def lexical(self) -> Any:
        """The replica's BM25 index, built on the first call."""
        return self.replica.lexical(self.scan_messages, self.db.transaction)

    @property
    def feed_position(self) -> int:
        """The position of the last commit in the change feed."""
        return self._position

    def changes_since(self, position: int) -> Changes:
        """The commits after ``position`` since this store opened (kept in memory: DuckDB has
        no other writer); older positions get ``reset``."""
        with self.db.lock:  # no commit lands while the feed is read
            head = self._position
            if position == head:
                return Changes(head)
            # Positions are consecutive: the entries after ``position`` are the feed's last ones.
            entries = list(itertools.islice(reversed(self._feed), max(head - position, 0)))[::-1]
            if position > head or not entries or entries[0].position != position + 1:
                return Changes(head, reset=True)
        return Changes.merged(head, entries)

    def scan_messages(self, batch: int = 50_000) -> Iterator[list[MessageRow]]:
        reader = self.db.cursor().sql(
            f"SELECT id, thread_id, resource_id, epoch_us(created_at), seq, {PAYLOAD_SQL} "
            "FROM messages ORDER BY seq"
        ).to_arrow_reader(batch)
        for chunk in reader:
            yield list(zip(*(chunk.column(i).to_pylist() for i in range(6))))

    def _unmirror(self, ids: list[str]) -> None:
        self.replica.remove(ids)
        self._publish(Changes(self._position + 1, deleted=ids))

    def _unmirror_thread(self, thread_id: str) -> None:
        self.replica.remove_thread(thread_id)
        self._publish(Changes(self._position + 1, deleted_threads=[thread_id]))

    def _publish(self, changes: Changes) -> None:
        self._position = changes.position
        self._feed.append(changes)

    def _touch_threads(self, tx: Any, thread_ids: set[str]) -> None:
        """Set ``updated_at = now`` on these threads; once committed, they are cached as they
        are now, so the next write to them needs no read."""
        written = self._written_threads()
        thread_ids = thread_ids - written.keys()  # created or touched by this transaction: now
        if not thread_ids:
            return
        now = _now()
        tx.execute("UPDATE threads SET updated_at = ?, folded_seq = ? WHERE id IN (SELECT unnest(?))",
                   [now, self._seq, sorted(thread_ids)])
        self._saved_thread_ids().update(thread_ids)
        for thread_id in thread_ids:
            self._tx_touches().pop(thread_id, None)
        touched = {t.id: Thread(t.id, t.resource_id, t.title, t.metadata, t.created_at, now)
                   for t in self.get_threads(thread_ids).values()}  # not replace(): far slower
        written.update(touched)

        def committed() -> None:
            self._threads.put(touched.values())
            for thread_id in thread_ids:
                self._lagging.pop(thread_id, None)
        self.db.on_commit(committed)

    def _touch_lagging(self, thread_ids: set[str], now: datetime) -> set[str]:
        """Set ``updated_at = now`` on these threads without a statement: the messages saved
        to them record it, and the threads table takes it when touches are folded. Returns the
        threads touched (those the open transaction has not written already)."""
        written = self._written_threads()
        touched = {t.id: Thread(t.id, t.resource_id, t.title, t.metadata, t.created_at, now)
                   for t in self.get_threads(thread_ids - written.keys()).values()}
        if not touched:
            return set()
        written.update(touched)
        self._tx_touches().update(dict.fromkeys(touched, now))

        def committed() -> None:
            self._threads.put(touched.values())
            self._lagging.update(dict.fromkeys(touched, now))
        self.db.on_commit(committed)
        return set(touched)

    def _fold_touches(self) -> None:
        """Write the lagging thread touches into the threads table (one statement, in the
        open transaction or one of its own)."""
        if not self._lagging and not (self.db.in_transaction and self._tx_touches()):
            return
        with self.db.transaction() as tx:
            saved = self._saved_thread_ids()
            due = {i: at for i, at in self._lagging.items() if i not in saved}
            due.update(self._tx_touches())
            if not due:
                return
            ids = list(due)
            tx.execute(FOLD_TOUCHES, [self._seq, ids, [due[i] for i in ids]])
            self._tx_touches().clear()
            saved.update(ids)

            def committed() -> None:
                for thread_id in ids:
                    if self._lagging.get(thread_id) == due[thread_id]:
                        del self._lagging[thread_id]
            self.db.on_commit(committed)

    def _current(self, thread: Thread, saved: set[str]) -> Thread:
        """A thread read from the threads table, with its lagging touch (unless the open
        transaction wrote the row, which is then current)."""
        at = self._lagging.get(thread.id)
        if at is None or thread.id in saved:
            return thread
        return Thread(thread.id, thread.resource_id, thread.title, thread.metadata, thread.created_at, at)

    def _tx_touches(self) -> dict[str, datetime]:
        """Touches the open transaction made without a statement, by thread id."""
        return self.db.scratch.setdefault("touches", {}) if self.db.in_transaction else {}

    def _written_threads(self) -> dict[str, Thread]:
        """Threads as the open transaction wrote them (created or touched), by id. Its reads
        see them; the cache gets them only once it commits."""
        return self.db.scratch.setdefault("written_threads", {}) if self.db.in_transaction else {}

    def _saved_thread_ids(self) -> set[str]:
        """Ids of the threads the open transaction inserted or replaced (lookups of other ids
        not yet committed need no query: they do not exist)."""
        return self.db.scratch.setdefault("saved_thread_ids", set()) if self.db.in_transaction else set()

    def _committed_threads(self, threads: Iterable[Thread]) -> None:
        threads = list(threads)
        self._threads.put(threads)
        self._owners.update((t.id, t.resource_id) for t in threads)

    def _absent_threads(self) -> set[str]:
        """Ids the open transaction looked up and found missing, and has not written since:
        its next lookups of them need no query (a thread's creation reads it three times)."""
        return self.db.scratch.setdefault("absent_threads", set()) if self.db.in_transaction else set()

    def _forget_threads(self, thread_ids: Iterable[str]) -> None:
        """Drop changed threads from the cache now and again once the change commits."""
        ids = list(thread_ids)
        self._threads.drop(ids)
        written = self._written_threads()
        touches = self._tx_touches()
        self._absent_threads().difference_update(ids)
        for thread_id in ids:
            written.pop(thread_id, None)
            touches.pop(thread_id, None)

        def committed() -> None:
            self._threads.drop(ids)
            for thread_id in ids:
                self._lagging.pop(thread_id, None)
        self.db.on_commit(committed)

    def _mirror(self, messages: Sequence[Message], seqs: Sequence[int], payloads: list[str]) -> None:
        self.replica.upsert(messages, seqs, payloads)
        rows = [(m.id, m.thread_id, m.resource_id, to_micros(m.created_at), q, p)
                for m, q, p in zip(messages, seqs, payloads)]
        self._publish(Changes(self._position + 1, upserted=rows))

    def _load_replica(self, batch: int = 100_000) -> None:
        (self._seq,) = self.db.fetch_one("SELECT coalesce(max(seq), 0) FROM messages") or (0,)
        self._owners.update(self.db.cursor().execute("SELECT id, resource_id FROM threads").fetchall())
        reader = self.db.cursor().sql(
            f"SELECT id, thread_id, resource_id, epoch_us(created_at), seq, {PAYLOAD_SQL}, metadata "
            "FROM messages ORDER BY seq"
        ).to_arrow_reader(batch)
        for chunk in reader:
            columns = [chunk.column(i).to_pylist() for i in range(7)]
            self.replica.upsert_rows(list(zip(*columns[:6])), metadata_json=columns[6])


def _key(path: str | Path) -> str | None:
    """The registry key of a database path (None for in-memory databases, never shared)."""
    text = str(path)
    if text == ":memory:" or text.startswith(":memory:"):
        return None
    return str(Path(text).expanduser().resolve())
