"""DuckDB storage of threads, messages and resources: the source of truth.

Messages are also mirrored, after each commit, into the Rust core's ``Timeline``: per-thread
orderings and metadata that serve ``recall`` in microseconds without a query. DuckDB is written
first, inside one transaction per call; the mirror follows only what committed, and is rebuilt
from the database when a store is opened. A second mirror, the BM25 ``LexicalIndex`` of
message text, is built on first use (lexical or hybrid recall) and then kept up to date the same way.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa

from ... import _core
from ...config import is_count
from ...errors import InvalidArgumentError, ThreadNotFoundError
from ...types import (
    Message,
    MessageContent,
    Resource,
    Thread,
    ThreadPage,
    dumps,
    search_text,
    to_utc,
)
from .database import Database
from ..thread_cache import ThreadCache
from ..thread_filter import thread_filter_sql, validate_thread_filter

__all__ = ["DuckDBStorage", "MessageRow", "message_of", "messages_of"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

MIGRATIONS = [
    """
    CREATE TABLE threads (
        id TEXT PRIMARY KEY,
        resource_id TEXT NOT NULL,
        title TEXT NOT NULL DEFAULT '',
        metadata JSON NOT NULL DEFAULT '{}',
        created_at TIMESTAMPTZ NOT NULL,
        updated_at TIMESTAMPTZ NOT NULL
    );
    CREATE INDEX threads_resource ON threads (resource_id);
    CREATE TABLE messages (
        id TEXT PRIMARY KEY,
        thread_id TEXT NOT NULL,
        resource_id TEXT,
        role TEXT NOT NULL,
        type TEXT NOT NULL DEFAULT 'text',
        content JSON NOT NULL,
        metadata JSON NOT NULL DEFAULT '{}',
        created_at TIMESTAMPTZ NOT NULL,
        seq BIGINT NOT NULL
    );
    CREATE INDEX messages_thread ON messages (thread_id);
    CREATE TABLE resources (
        id TEXT PRIMARY KEY,
        working_memory TEXT,
        metadata JSON NOT NULL DEFAULT '{}',
        created_at TIMESTAMPTZ NOT NULL,
        updated_at TIMESTAMPTZ NOT NULL
    );
    """,
]

_UPSERT_MESSAGES = """
    INSERT INTO messages SELECT * FROM incoming
    ON CONFLICT (id) DO UPDATE SET thread_id = excluded.thread_id,
        resource_id = excluded.resource_id, role = excluded.role,
        type = excluded.type, content = excluded.content,
        metadata = excluded.metadata
"""

# Batches up to this size are inserted with bound values: for a few rows that costs less than
# registering an Arrow table and scanning it.
VALUES_ROWS = 16
_MESSAGE_VALUES = "(?, ?, ?, ?, ?, ?, ?, make_timestamptz(?::BIGINT), ?)"

# A mirrored message: (id, thread_id, resource_id, created_at µs, seq, payload JSON).
MessageRow = tuple[str, str, "str | None", int, int, str]

_PAYLOAD_SQL = (
    "'{\"role\":' || to_json(role) || ',\"type\":' || to_json(type) || ',\"content\":' || content"
    " || ',\"metadata\":' || metadata || '}'"
)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def to_micros(value: datetime) -> int:
    delta = to_utc(value) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_micros(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


def _payload(role: str, type_: str, content: str, metadata: str) -> str:
    """The mirrored body of a message, built from its already-encoded JSON columns."""
    return f'{{"role":{_quoted(role)},"type":{_quoted(type_)},"content":{content},"metadata":{metadata}}}'


@functools.lru_cache(maxsize=256)
def _quoted(text: str) -> str:
    """A JSON string literal (roles and types repeat, so they are encoded once)."""
    return dumps(text)


def message_of(row: MessageRow) -> Message:
    """Decode a mirrored row into a Message."""
    mid, thread_id, resource_id, micros, _seq, payload = row
    body = json.loads(payload)
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


def messages_of(rows: Sequence[MessageRow]) -> list[Message]:
    """Decode mirrored rows into Messages, every payload parsed in one pass of the decoder."""
    if not rows:
        return []
    bodies = json.loads("[" + ",".join([row[5] for row in rows]) + "]")
    out = []
    for (mid, thread_id, resource_id, micros, _seq, _payload), body in zip(rows, bodies):
        content = body["content"]
        out.append(Message(mid, thread_id, resource_id, body["role"],
                           MessageContent(content.get("parts") or [], content.get("text")),
                           from_micros(micros), body["type"], body["metadata"]))
    return out


class DuckDBStorage:
    """Threads, messages and resources in a DuckDB file (or ``:memory:``).

    >>> storage = DuckDBStorage()
    >>> storage.save_thread(Thread(id="t1", resource_id="r1")).title
    ''
    """

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.db = Database(path)
        self.db.migrate("memory", MIGRATIONS)
        self.timeline = _core.Timeline()
        self._threads = ThreadCache()
        self._seq = 0
        self._unsaved: set[str] = set()  # message ids written by the open transaction
        self._load_timeline()
        self._lexical: _core.LexicalIndex | None = None

    @property
    def path(self) -> str:
        return self.db.path

    def close(self) -> None:
        self.db.close()

    def transaction(self) -> Any:
        """A context in which every write commits together or not at all (nested calls join
        the outermost one)."""
        return self.db.transaction()

    # ----------------------------------------------------------------------------- threads

    def get_thread(self, thread_id: str) -> Thread | None:
        return self.get_threads([thread_id]).get(thread_id)

    def get_threads(self, thread_ids: Iterable[str]) -> dict[str, Thread]:
        """The existing threads among ``thread_ids``, by id (cached, else one query)."""
        wanted = list(dict.fromkeys(thread_ids))
        found = self._threads.get_many(wanted)
        if written := self._written_threads():  # newer than the cache's committed versions
            found.update((i, written[i]) for i in wanted if i in written)
        missing = [i for i in wanted if i not in found]
        if missing:
            rows = self.db.cursor().execute(
                "SELECT id, resource_id, title, metadata, created_at, updated_at FROM threads "
                "WHERE id IN (SELECT unnest(?))",
                [missing],
            ).fetchall()
            loaded = [_thread(row) for row in rows]
            if not self.db.in_transaction:
                self._threads.put(loaded)
            found.update((t.id, t) for t in loaded)
        return found

    def save_thread(self, thread: Thread) -> Thread:
        """Insert or replace a thread (an existing thread keeps its ``created_at``)."""
        return self.save_threads([thread])[thread.id]

    def save_threads(self, threads: Sequence[Thread]) -> dict[str, Thread]:
        """Insert or replace threads in one statement; returns them as stored, by id."""
        if not threads:
            return {}
        with self.db.transaction() as tx:
            tx.register("incoming_threads", _thread_table(threads))
            try:
                rows = tx.execute(
                    """
                    INSERT INTO threads SELECT * FROM incoming_threads
                    ON CONFLICT (id) DO UPDATE SET resource_id = excluded.resource_id,
                        title = excluded.title, metadata = excluded.metadata,
                        updated_at = excluded.updated_at
                    RETURNING id, resource_id, title, metadata, created_at, updated_at
                    """
                ).fetchall()
            finally:
                tx.unregister("incoming_threads")
            self._forget_threads(row[0] for row in rows)
        return {row[0]: _thread(row) for row in rows}

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
            tx.register("incoming_threads", _thread_table(list(made.values())))
            try:
                tx.execute("INSERT INTO threads SELECT * FROM incoming_threads")
            finally:
                tx.unregister("incoming_threads")
            self._written_threads().update(made)
            self.db.on_commit(lambda: self._threads.put(made.values()))
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
            tx.execute("DELETE FROM messages WHERE thread_id = ?", [thread_id])
            tx.execute("DELETE FROM threads WHERE id = ?", [thread_id])
            self._forget_threads([thread_id])
            self.db.on_commit(lambda: self._unmirror_thread(thread_id))

    def list_threads(self, *, resource_id: str | None = None, metadata: Any = None, page: int = 0,
                     per_page: int | bool = 100, order_by: Mapping[str, str] | None = None) -> ThreadPage:
        if not is_count(page):
            raise InvalidArgumentError("page must be >= 0")
        if per_page is not False and not is_count(per_page):
            raise InvalidArgumentError("perPage must be >= 0")
        if per_page is False and page != 0:
            raise InvalidArgumentError("page must be 0 when perPage is false")
        field, direction = _thread_order(order_by)
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
        return ThreadPage([_thread(r) for r in rows], total, page, per_page, has_more)

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
        row = self.timeline.get(message_id)
        return message_of(row) if row else None

    def thread_messages(self, thread_id: str) -> list[Message]:
        """Every message of a thread, oldest first."""
        rows, _ = self.timeline.page(thread_id)
        return [message_of(r) for r in rows]

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
            self._unsaved.update(latest)
            self.db.on_commit(self._unsaved.clear)
            for m in latest.values():
                existing = self.timeline.get(m.id)
                if existing is None:
                    self._seq += 1
                    seqs.append(self._seq)
                    stored.append(m)
                else:
                    replacing = True
                    seqs.append(existing[4])
                    stored.append(replace(m, created_at=from_micros(existing[3])))
            contents = [dumps(m.content.to_dict()) for m in stored]
            metadatas = [dumps(m.metadata) for m in stored]
            sql = _UPSERT_MESSAGES if replacing else "INSERT INTO messages SELECT * FROM incoming"
            if len(stored) <= VALUES_ROWS:  # a turn's few messages: bound values, no Arrow scan
                params = [v for m, seq, c, md in zip(stored, seqs, contents, metadatas) for v in (
                    m.id, m.thread_id, m.resource_id, m.role, m.type, c, md, to_micros(m.created_at),
                    seq)]
                values = "VALUES " + ", ".join([_MESSAGE_VALUES] * len(stored))
                tx.execute(sql.replace("SELECT * FROM incoming", values), params)
            else:
                tx.register("incoming", _message_table(stored, seqs, contents, metadatas))
                try:
                    tx.execute(sql)
                finally:
                    tx.unregister("incoming")
            self._touch_threads(tx, {m.thread_id for m in stored})
            payloads = [_payload(m.role, m.type, c, md) for m, c, md in zip(stored, contents, metadatas)]
            self.db.on_commit(lambda: self._mirror(stored, seqs, payloads))
        return stored

    def delete_messages(self, ids: Iterable[str]) -> list[str]:
        """Delete messages by id; unknown ids are ignored. Returns the ids that existed."""
        found = [(i, row[1]) for i in dict.fromkeys(ids) if (row := self.timeline.get(i))]
        if not found:
            return []
        gone = [i for i, _ in found]
        with self.db.transaction() as tx:
            tx.execute("DELETE FROM messages WHERE id IN (SELECT unnest(?))", [gone])
            self._touch_threads(tx, {t for _, t in found})
            self.db.on_commit(lambda: self._unmirror(gone))
        return gone

    # ----------------------------------------------------------------------------- lexical index

    def lexical(self) -> _core.LexicalIndex:
        """The BM25 index of message search text, built from the database on the first call
        and kept up to date after every commit from then on."""
        if self._lexical is None:
            with self.db.transaction() as tx:  # serialised with writers: no commit lands meanwhile
                if self._lexical is None:
                    self._lexical = self._build_lexical(tx)
        return self._lexical

    def _build_lexical(self, tx: Any, batch: int = 50_000) -> _core.LexicalIndex:
        index = _core.LexicalIndex()
        reader = tx.sql("SELECT id, thread_id, resource_id, content, metadata, epoch_us(created_at) AS t "
                        "FROM messages ORDER BY seq").to_arrow_reader(batch)
        for chunk in reader:
            cols = chunk.to_pydict()
            texts = [search_text(MessageContent.coerce(json.loads(c)).plain_text, json.loads(m))
                     for c, m in zip(cols["content"], cols["metadata"])]
            index.upsert(cols["id"], cols["thread_id"], cols["resource_id"], texts, cols["t"])
        return index

    def _unmirror(self, ids: list[str]) -> None:
        self.timeline.remove(ids)
        if self._lexical is not None:
            self._lexical.remove(ids)

    def _unmirror_thread(self, thread_id: str) -> None:
        self.timeline.remove_thread(thread_id)
        if self._lexical is not None:
            self._lexical.remove_thread(thread_id)

    def _touch_threads(self, tx: Any, thread_ids: set[str]) -> None:
        """Set ``updated_at = now`` on these threads; once committed, they are cached as they
        are now, so the next write to them needs no read."""
        written = self._written_threads()
        thread_ids = thread_ids - written.keys()  # created or touched by this transaction: now
        if not thread_ids:
            return
        now = _now()
        if len(thread_ids) == 1:  # the usual turn: one thread, a point update
            (thread_id,) = thread_ids
            tx.execute("UPDATE threads SET updated_at = ? WHERE id = ?", [now, thread_id])
        else:
            tx.execute("UPDATE threads SET updated_at = ? WHERE id IN (SELECT unnest(?))",
                       [now, sorted(thread_ids)])
        touched = {t.id: Thread(t.id, t.resource_id, t.title, t.metadata, t.created_at, now)
                   for t in self.get_threads(thread_ids).values()}  # not replace(): far slower
        written.update(touched)
        self.db.on_commit(lambda: self._threads.put(touched.values()))

    def _written_threads(self) -> dict[str, Thread]:
        """Threads as the open transaction wrote them (created or touched), by id. Its reads
        see them; the cache gets them only once it commits."""
        return self.db.scratch.setdefault("written_threads", {}) if self.db.in_transaction else {}

    def _forget_threads(self, thread_ids: Iterable[str]) -> None:
        """Drop changed threads from the cache now and again once the change commits."""
        ids = list(thread_ids)
        self._threads.drop(ids)
        written = self._written_threads()
        for thread_id in ids:
            written.pop(thread_id, None)
        self.db.on_commit(lambda: self._threads.drop(ids))

    def _mirror(self, messages: Sequence[Message], seqs: Sequence[int], payloads: list[str]) -> None:
        self.timeline.upsert(
            [m.id for m in messages],
            [m.thread_id for m in messages],
            [m.resource_id for m in messages],
            [to_micros(m.created_at) for m in messages],
            list(seqs),
            [m.metadata for m in messages],
            payloads,
        )
        if self._lexical is not None:
            self._lexical.upsert([m.id for m in messages], [m.thread_id for m in messages],
                                 [m.resource_id for m in messages], [m.search_text for m in messages],
                                 [to_micros(m.created_at) for m in messages])

    def _load_timeline(self, batch: int = 100_000) -> None:
        self._seq = self.db.fetch_one("SELECT coalesce(max(seq), 0) FROM messages")[0]
        reader = self.db.cursor().sql(
            f"SELECT id, thread_id, resource_id, epoch_us(created_at), seq, metadata, {_PAYLOAD_SQL} "
            "FROM messages ORDER BY seq"
        ).to_arrow_reader(batch)
        for chunk in reader:
            cols = chunk.to_pydict()
            rows = (cols["id"], cols["thread_id"], cols["resource_id"], cols[chunk.schema.names[3]], cols["seq"])
            payloads = cols[chunk.schema.names[6]]
            try:  # the stored JSON texts, parsed in the core
                self.timeline.upsert(*rows, None, payloads, metadata_json=cols["metadata"])
            except InvalidArgumentError:  # NaN or infinities, which only Python's JSON reads
                self.timeline.upsert(*rows, [json.loads(m) for m in cols["metadata"]], payloads)


def _message_table(messages: Sequence[Message], seqs: Sequence[int], contents: list[str],
                   metadatas: list[str]) -> pa.Table:
    return pa.table({
        "id": [m.id for m in messages],
        "thread_id": [m.thread_id for m in messages],
        "resource_id": pa.array([m.resource_id for m in messages], pa.string()),
        "role": [m.role for m in messages],
        "type": [m.type for m in messages],
        "content": contents,
        "metadata": metadatas,
        "created_at": pa.array([to_micros(m.created_at) for m in messages], pa.timestamp("us", tz="UTC")),
        "seq": pa.array(seqs, pa.int64()),
    })


def _thread_table(threads: Sequence[Thread]) -> pa.Table:
    now = _now()
    return pa.table({
        "id": [t.id for t in threads],
        "resource_id": [t.resource_id for t in threads],
        "title": [t.title or "" for t in threads],
        "metadata": [dumps(t.metadata or {}) for t in threads],
        "created_at": pa.array([t.created_at or now for t in threads], pa.timestamp("us", tz="UTC")),
        "updated_at": pa.array([t.updated_at or now for t in threads], pa.timestamp("us", tz="UTC")),
    })


def _thread(row: Sequence[Any]) -> Thread:
    return Thread(
        id=row[0], resource_id=row[1], title=row[2], metadata=json.loads(row[3]),
        created_at=to_utc(row[4]), updated_at=to_utc(row[5]),
    )


def _thread_order(order_by: Mapping[str, str] | None) -> tuple[str, str]:
    order_by = order_by or {}
    field = order_by.get("field", "created_at")
    direction = str(order_by.get("direction", "DESC")).upper()
    if field not in ("created_at", "updated_at"):
        raise InvalidArgumentError(f"order_by.field must be 'created_at' or 'updated_at', got {field!r}")
    if direction not in ("ASC", "DESC"):
        raise InvalidArgumentError(f"order_by.direction must be 'ASC' or 'DESC', got {direction!r}")
    return field, direction



def new_id() -> str:
    return str(uuid.uuid4())
