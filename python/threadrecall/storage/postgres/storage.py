"""PostgreSQL storage of threads, messages and resources, shared by any number of processes.

Nothing is cached: every call asks the database, so it sees every write that any process
committed before it began. Outside ``transaction()`` a call is one statement on a pooled
connection in autocommit mode (one round trip), kept out of the pool between calls while it
is idle (``_take``/``_give``); inside, every call of the thread runs on the
transaction's connection and sees its writes. Recall's reads (``page``, ``window``) are single
statements with the semantics of the core's ``Timeline``, and message writes feed the change
feed (``changes_since``) in the same transaction, under its transaction id.
"""

from __future__ import annotations

import contextlib
import json
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field, replace
from operator import itemgetter
from typing import Any, TypeVar, cast

import psycopg
from psycopg import errors, sql
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ... import _core, loop_bridge
from ...errors import InvalidArgumentError, ThreadNotFoundError
from ...types import Message, Resource, Thread, ThreadPage, to_utc
from ..base import Changes
from ..replica import Replica
from ..rows import ColumnRow, MessageRow, messages_of, payload
from ..thread_filter import validate_thread_filter
from ..thread_listing import check_thread_paging, thread_order
from ..thread_owners import missing_thread, owned
from . import queries as q
from .async_pools import LoopPools, fetch
from .containment import filter_value
from .prepared import Named, named_statement, run_named, text_values
from .schema import migrate, quoted_schema
from .values import as_stored, checked_count, json_text, message_params, thread_of, thread_params, utc_now

__all__ = ["PostgresStorage"]

T = TypeVar("T")
_RETRIED = (errors.DeadlockDetected, errors.SerializationFailure)
_PRUNE_EVERY = 1000  # writes between two prunings of the change feed


@dataclass
class _Transaction:
    """The open transaction of one Python thread."""

    conn: psycopg.Connection
    depth: int = 1
    callbacks: list[Callable[[], None]] = field(default_factory=list)
    finishing: list[Callable[[psycopg.Connection], None]] = field(default_factory=list)
    scratch: dict[str, Any] = field(default_factory=dict)
    kinds: list[str] = field(default_factory=list)  # feed entries, written before the commit
    refs: list[str] = field(default_factory=list)

    def log(self, kind: str, refs: Iterable[str]) -> None:
        for ref in refs:
            self.kinds.append(kind)
            self.refs.append(ref)


class _ThreadState(threading.local):
    """Per Python thread: its open transaction (``None`` as a class default, so a thread that
    never opened one reads it without a failed attribute lookup)."""

    tx: _Transaction | None = None


class PostgresStorage:
    """Threads, messages and resources in one PostgreSQL schema.

    ``dsn_or_pool`` is a connection string, a ``psycopg_pool.ConnectionPool`` or an
    ``AsyncConnectionPool`` (a given pool is the caller's, left open by ``close()``; the other
    kind is made from its connection settings). The schema is created or migrated on first open.

    Blocking calls run on pooled connections; the same calls made through ``run_async``
    (``Memory``'s async twins do) await pooled ``psycopg.AsyncConnection`` objects on the
    running loop instead, with the same statements, and ``atransaction`` is ``transaction``
    awaited.

    >>> storage = PostgresStorage(dsn, schema="docs_example")  # doctest: +SKIP
    >>> storage.save_thread(Thread(id="t1", resource_id="r1")).title  # doctest: +SKIP
    ''
    """

    def __init__(self, dsn_or_pool: str | ConnectionPool | AsyncConnectionPool, *,
                 schema: str = "threadrecall", max_connections: int = 10,
                 keep_changes: int = 100_000) -> None:
        quoted_schema(schema)  # a bad name fails before any connection is made
        self.schema = schema
        self.keep_changes = checked_count("keep_changes", keep_changes)
        self._writes = 0
        name = f"threadrecall.{schema}"
        given_async = dsn_or_pool if isinstance(dsn_or_pool, AsyncConnectionPool) else None
        conninfo: str
        kwargs: dict[str, Any]
        if isinstance(dsn_or_pool, ConnectionPool):
            self._pool, self._owns_pool = dsn_or_pool, False
            # a pool's conninfo and kwargs may be callables to psycopg; a given pool here has them as values
            conninfo, kwargs = cast(str, dsn_or_pool.conninfo), cast(dict[str, Any], dsn_or_pool.kwargs or {})
            with self._pool.connection() as conn:
                self._prepare(conn)
        else:
            if given_async is not None:
                conninfo, kwargs = cast(str, given_async.conninfo), cast(dict[str, Any], given_async.kwargs or {})
            else:
                conninfo, kwargs = cast(str, dsn_or_pool), {}
            with psycopg.connect(conninfo, **{**kwargs, "autocommit": True}) as conn:
                self._prepare(conn)
            self._pool = ConnectionPool(conninfo, min_size=1, max_size=max_connections,
                                        kwargs={**kwargs, "autocommit": True}, open=True, name=name)
            self._owns_pool = True
        # Idle connections of the owned pool kept out of it (last in, first out): taking one is
        # a list pop, where the pool's checkout and return cost 10 to 20 µs of a statement.
        # ``_waiting`` counts the callers waiting for the pool itself; while any is, a
        # connection given back goes to the pool, so that nobody waits for one kept here. A
        # kept connection is past the pool's reach (its ``max_lifetime`` and ``max_idle``) until
        # it goes back: when it is found broken, or by ``close()``.
        self._spare: list[psycopg.Connection] = []
        self._waiting = 0
        self._waiting_lock = threading.Lock()
        self._apools = LoopPools(conninfo, kwargs, max_connections, name, given_async)
        self._local = _ThreadState()
        # One cursor per pooled connection for lone statements (a connection serves one
        # thread at a time), which saves making one per call (``_cursor``).
        self._cursors: dict[psycopg.Connection, psycopg.Cursor] = {}
        self._cursors_lock = threading.Lock()
        self._named: weakref.WeakKeyDictionary[psycopg.Connection, Named] = (
            weakref.WeakKeyDictionary())
        self._replica: Replica | None = None
        self._replica_lock = threading.Lock()
        self._feed_lock = threading.Lock()
        # The last watermark ``changes_since`` returned, with the transactions above it that it
        # had already handed out.
        self._ahead: tuple[int, frozenset[int]] = (-1, frozenset())
        self._pages: dict[tuple[Any, ...], str] = {}
        self._thread_pages: dict[tuple[Any, ...], str] = {}

    def _prepare(self, conn: psycopg.Connection) -> None:
        migrate(conn, self.schema)
        ident = quoted_schema(self.schema).as_string(conn)
        self._ident = ident
        self._seq = sql.Literal(f"{ident}.message_seq").as_string(conn)
        self._sql = {name: self._text(getattr(q, name)) for name in (
            "CHANGES_SINCE", "CREATE_THREADS", "FLUSH_CHANGES", "FOLD_COUNTS", "GET_MESSAGES",
            "GET_RESOURCE", "GET_THREADS", "PRUNE_CHANGES", "SAVE_RESOURCE", "SAVE_THREADS",
            "SCAN_MESSAGES", "THREAD_FOR_UPDATE", "THREAD_MESSAGES")}
        for name in ("SAVE_MESSAGES", "SAVE_TURN", "DELETE_MESSAGES", "DELETE_THREAD"):
            plain, logged = getattr(q, name)
            self._sql[name] = self._text(plain)
            self._sql[name + "_LOGGED"] = self._text(logged)
        self._sql["LOCK"] = q.LOCK
        for scoped in (False, True):
            for name in ("WINDOW", "OWNED_WINDOW"):
                self._sql[f"{name}_{scoped}"] = self._text(getattr(q, name)).replace(
                    "{target_scope}", "WHERE m.resource_id = %(resource)s" if scoped else "").replace(
                    "{scope}", "AND x.resource_id = %(resource)s" if scoped else "")

    def _text(self, template: str) -> str:
        return template.replace("{s}", self._ident).replace("{seq}", self._seq)

    def close(self) -> None:
        if self._owns_pool:
            self._pool.close()
            while self._spare:  # closed with the pool, which no longer hands them out
                with contextlib.suppress(IndexError):
                    self._spare.pop().close()
        self._apools.close()

    async def aclose(self) -> None:
        """``close()`` from a coroutine: the running loop's async pool is closed awaited."""
        await self._apools.aclose()
        self.close()

    async def run_async(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Call ``fn(*args, **kwargs)`` with this storage's round trips awaited on the running
        loop (``loop_bridge.run``): its calls of this storage go to async connections.

        >>> async def title(storage):  # doctest: +SKIP
        ...     return (await storage.run_async(storage.get_thread, "t1")).title
        """
        async with loop_bridge.task_state():
            return await loop_bridge.run(fn, *args, **kwargs)

    @asynccontextmanager
    async def atransaction(self, *, lock: str | None = None) -> AsyncIterator[None]:
        """``transaction()`` for coroutines: ``run_async`` calls of this task inside join it.

        >>> async def both(storage, a, b):  # doctest: +SKIP
        ...     async with storage.atransaction():
        ...         await storage.run_async(storage.save_threads, [a, b])
        """
        async with loop_bridge.task_state():
            manager = self.transaction(lock=lock)
            await loop_bridge.run(manager.__enter__)
            try:
                yield
            except BaseException as exc:
                if not await loop_bridge.run(manager.__exit__, type(exc), exc, exc.__traceback__):
                    raise
            else:
                await loop_bridge.run(manager.__exit__, None, None, None)

    def __enter__(self) -> PostgresStorage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------------- transactions

    @contextmanager
    def transaction(self, *, lock: str | None = None) -> Iterator[psycopg.Connection]:
        """A context in which every call of this thread commits together or not at all (nested
        calls join the outermost one). ``lock`` serialises it with every transaction taking the
        same key, in any process, until it ends."""
        tx = self._open()
        if tx is not None:
            tx.depth += 1
            try:
                if lock is not None:
                    self._lock(tx.conn, lock)
                yield tx.conn
            finally:
                tx.depth -= 1
            return
        # In pipeline mode BEGIN travels with the first statement and the feed entry with
        # COMMIT: a transaction costs no round trip of its own. Awaited (inside run_async),
        # the same steps run on an async connection.
        connection: Any  # awaited, an async connection used through ``synced`` as a blocking one
        if loop_bridge.awaiting():
            synced = loop_bridge.entered
            connection = synced(loop_bridge.wait(self._apools.pool()).connection())
        else:
            synced, connection = _as_is, self._connection()
        with connection as conn, synced(conn.pipeline()):
            tx = _Transaction(conn)
            self._set_open(tx)
            try:
                with synced(conn.transaction()):
                    if lock is not None:
                        self._lock(conn, lock)
                    yield conn
                    for finish in tx.finishing:
                        finish(conn)
                    if tx.kinds:
                        _execute(conn, self._sql["FLUSH_CHANGES"], {"kinds": tx.kinds, "refs": tx.refs},
                                 rows=False)
            finally:
                self._set_open(None)
        for callback in tx.callbacks:
            callback()

    def on_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the open transaction commits (at once when none is open)."""
        tx = self._open()
        if tx is None:
            callback()
        else:
            tx.callbacks.append(callback)

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A pooled connection in autocommit mode, outside any open transaction: each
        statement on it sees the committed state."""
        with self._connection() as conn:
            yield conn

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection]:
        conn = self._take()
        try:
            yield conn
        finally:
            self._give(conn)

    def _take(self) -> psycopg.Connection:
        """A connection of this object's own: a kept one, else one from the pool."""
        try:
            return self._spare.pop()
        except IndexError:
            pass
        with self._waiting_lock:
            self._waiting += 1
        try:
            try:  # one given back before this caller counted as waiting
                return self._spare.pop()
            except IndexError:
                return self._pool.getconn()
        finally:
            with self._waiting_lock:
                self._waiting -= 1

    def _give(self, conn: psycopg.Connection) -> None:
        """Keep an idle connection in autocommit mode for the next statement (only of a pool
        this object made; after ``close()`` none); the pool takes back any other, and every
        one while a caller waits for the pool (the pool resets or replaces a broken one)."""
        if (not self._owns_pool or conn.pgconn.transaction_status != TransactionStatus.IDLE
                or not conn.autocommit or self._pool.closed):
            self._pool.putconn(conn)
            return
        self._spare.append(conn)
        if self._waiting or self._pool.closed:  # counted or closed after the check above
            with contextlib.suppress(IndexError):
                self._pool.putconn(self._spare.pop())

    def before_commit(self, callback: Callable[[psycopg.Connection], None]) -> None:
        """Run ``callback(connection)`` as the open transaction's last writes, just before
        its change-feed entry and commit (for positions that must follow commit order)."""
        tx = self._open()
        if tx is None:
            raise RuntimeError("before_commit needs an open transaction")
        tx.finishing.append(callback)

    @property
    def scratch(self) -> dict[str, Any]:
        """Notes about the open transaction's own writes, dropped when it ends."""
        tx = self._open()
        if tx is None:
            raise RuntimeError("scratch needs an open transaction")
        return tx.scratch

    @property
    def in_transaction(self) -> bool:
        return self._open() is not None

    def _open(self) -> _Transaction | None:
        """The open transaction of this thread (of this task, inside ``run_async``)."""
        if loop_bridge.awaiting():
            return loop_bridge.state().get(self)
        return self._local.tx

    def _set_open(self, tx: _Transaction | None) -> None:
        if loop_bridge.awaiting():
            loop_bridge.state()[self] = tx
        else:
            self._local.tx = tx

    def _lock(self, conn: Any, key: str) -> None:
        _execute(conn, self._sql["LOCK"], {"key": f"threadrecall.{self.schema}:{key}"}, rows=False)

    def _fetch(self, query: str, params: Mapping[str, Any], *,
               binary: bool = False) -> list[tuple[Any, ...]]:
        """Run one statement: on the open transaction, else on a pooled connection (retried
        when PostgreSQL chose it as a deadlock victim: a lone statement is safe to redo).
        ``binary`` asks for the results in binary form (no number printed and parsed again)."""
        tx = self._open()
        if tx is not None:
            return _execute(tx.conn, query, params, binary=binary)
        if loop_bridge.awaiting():
            return loop_bridge.wait(self._apools.fetch(query, params, binary=binary))
        for attempt in range(4):
            conn = self._take()
            try:
                cursor = self._cursors.get(conn)
                if cursor is None or cursor.closed:
                    cursor = self._cursor(conn)
                return cursor.execute(query, params, binary=binary).fetchall()
            except _RETRIED:
                if attempt == 3:
                    raise
            finally:
                self._give(conn)
        raise AssertionError("unreachable")

    def _cursor(self, conn: psycopg.Connection) -> psycopg.Cursor:
        """A new cursor kept for ``conn``. A cursor holds its connection: those of connections
        closed since (the pool replaced them) are dropped here, so that none is kept alive."""
        with self._cursors_lock:
            for closed in [c for c in self._cursors if c.closed]:
                del self._cursors[closed]
            cursor = self._cursors[conn] = conn.cursor()
        return cursor

    def _read(self, query: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        """``_fetch(query, params, binary=True)`` for a read that runs often (recall's page and
        window). A lone one runs as a statement prepared by name on its connection, executed
        by libpq directly (a blocking call, which lets other threads run) and its rows loaded
        by psycopg's loaders: the same round trip and rows for about half the client's work of
        a cursor's ``execute``, most of which is psycopg's own Python. An open transaction,
        an awaited call, a value ``text_values`` does not pass, or a connection on which
        statements may not be prepared (``Named``) go through ``_fetch``."""
        if self._open() is None and not loop_bridge.awaiting():
            values = text_values(params, named_statement(query)[2])
            if values is not None:
                conn = self._take()
                try:
                    named = self._named.get(conn)
                    if named is None:
                        named = self._named[conn] = Named.of(conn)
                    if named.usable:
                        return run_named(conn, named, query, values)
                finally:
                    self._give(conn)
        return self._fetch(query, params, binary=True)

    def _write(self, name: str, params: Mapping[str, Any], kind: str,
               refs: Callable[[list[tuple[Any, ...]]], Iterable[str]]) -> list[tuple[Any, ...]]:
        """Run a write: alone with its feed entry, or in the open transaction, which writes the
        entries of all its writes before it commits."""
        self._writes += 1
        tx = self._open()
        if tx is None:
            rows = self._fetch(self._sql[name + "_LOGGED"], params)
            if self._writes % _PRUNE_EVERY == 0:
                self._tidy()
            return rows
        rows = _execute(tx.conn, self._sql[name], params)
        tx.log(kind, refs(rows))
        if self._writes % _PRUNE_EVERY == 0:
            tx.callbacks.append(self._tidy)
        return rows

    # ----------------------------------------------------------------------------- threads

    def get_thread(self, thread_id: str) -> Thread | None:
        return self.get_threads([thread_id]).get(thread_id)

    def get_threads(self, thread_ids: Iterable[str]) -> dict[str, Thread]:
        """The existing threads among ``thread_ids``, by id (one query)."""
        wanted = list(dict.fromkeys(thread_ids))
        if not wanted:
            return {}
        rows = self._fetch(self._sql["GET_THREADS"], {"ids": wanted})
        return {row[0]: thread_of(row) for row in rows}

    def save_thread(self, thread: Thread) -> Thread:
        """Insert or replace a thread (an existing thread keeps its ``created_at``)."""
        return self.save_threads([thread])[thread.id]

    def save_threads(self, threads: Sequence[Thread]) -> dict[str, Thread]:
        """Insert or replace threads in one statement; returns them as stored, by id."""
        if not threads:
            return {}
        latest = list({t.id: t for t in threads}.values())
        rows = self._fetch(self._sql["SAVE_THREADS"], thread_params(latest))
        return {row[0]: thread_of(row) for row in rows}

    def create_threads(self, threads: Sequence[Thread]) -> dict[str, Thread]:
        """Insert threads the caller found missing; one created meanwhile by another process is
        left as it is and returned as stored."""
        if not threads:
            return {}
        now = utc_now()
        made = {t.id: Thread(t.id, t.resource_id, t.title or "", t.metadata or {},
                             t.created_at or now, t.updated_at or now) for t in threads}
        inserted = {row[0] for row in self._fetch(self._sql["CREATE_THREADS"],
                                                  thread_params(list(made.values())))}
        if len(inserted) < len(made):
            made.update(self.get_threads(i for i in made if i not in inserted))
        return made

    def update_thread(self, thread_id: str, *, title: str | None = None,
                      metadata: Mapping[str, Any] | None = None) -> Thread:
        """Set the title (when given) and shallow-merge ``metadata`` into the thread's."""
        with self.transaction() as conn:
            found = _execute(conn, self._sql["THREAD_FOR_UPDATE"], {"id": thread_id})
            row = found[0] if found else None
            if row is None:
                raise ThreadNotFoundError(f"Thread with id {thread_id} not found")
            thread = thread_of(row)
            return self.save_thread(replace(
                thread, title=thread.title if title is None else title,
                metadata={**thread.metadata, **(metadata or {})}, updated_at=utc_now(),
            ))

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread and its messages (a missing thread is not an error)."""
        self._write("DELETE_THREAD", {"thread": thread_id}, "t",
                    lambda rows: [thread_id] if rows[0][0] else [])

    def list_threads(self, *, resource_id: str | None = None, metadata: Any = None, page: int = 0,
                     per_page: int | bool = 100, order_by: Mapping[str, str] | None = None) -> ThreadPage:
        check_thread_paging(page, per_page)
        field_, direction = thread_order(order_by)
        wanted = validate_thread_filter(metadata)
        shape = (resource_id is not None, bool(wanted), field_, direction)
        query = self._thread_pages.get(shape)
        if query is None:
            query = self._thread_pages[shape] = self._text(q.list_threads(
                resource=shape[0], metadata=shape[1], field=field_, direction=direction))
        limit = None if per_page is False else per_page
        offset = 0 if per_page is False else page * per_page
        rows = self._fetch(query, {"resource": resource_id, "limit": limit, "offset": offset,
                                   "filter": filter_value(wanted, exact_integers=True)})
        total = rows[0][0]
        threads = [thread_of(row[1:]) for row in rows if row[1] is not None]
        has_more = per_page is not False and offset + per_page < total
        return ThreadPage(threads, total, page, per_page, has_more)

    # ----------------------------------------------------------------------------- resources

    def get_resource(self, resource_id: str) -> Resource | None:
        rows = self._fetch(self._sql["GET_RESOURCE"], {"id": resource_id})
        if not rows:
            return None
        rid, working_memory, meta, created, updated = rows[0]
        return Resource(rid, working_memory, json.loads(meta), to_utc(created), to_utc(updated))

    def update_resource(self, resource_id: str, *, working_memory: str | None = None,
                        metadata: Mapping[str, Any] | None = None) -> Resource:
        """Create or update a resource: working memory replaced when given, metadata merged."""
        now = utc_now()
        with self.transaction(lock=f"resource:{resource_id}"):
            old = self.get_resource(resource_id) or Resource(resource_id, None, {}, now, now)
            new = replace(
                old,
                working_memory=old.working_memory if working_memory is None else working_memory,
                metadata={**old.metadata, **(metadata or {})},
                updated_at=now,
            )
            self._fetch(self._sql["SAVE_RESOURCE"] + " RETURNING id", {
                "id": new.id, "working_memory": new.working_memory, "metadata": json_text(new.metadata),
                "created": new.created_at, "updated": new.updated_at})
        return new

    # ----------------------------------------------------------------------------- messages

    def get_message(self, message_id: str) -> Message | None:
        found = self.get_messages([message_id])
        return found[0] if found else None

    def get_messages(self, message_ids: Iterable[str]) -> list[Message]:
        """The stored messages among ``message_ids``, in the order asked (unknown ids skipped)."""
        wanted = list(message_ids)
        if not wanted:
            return []
        rows = {r[0]: r for r in self._rows(self._sql["GET_MESSAGES"], {"ids": list(set(wanted))})}
        return messages_of([rows[i] for i in wanted if i in rows])

    def thread_messages(self, thread_id: str) -> list[Message]:
        """Every message of a thread, oldest first."""
        return messages_of(self._rows(self._sql["THREAD_MESSAGES"], {"thread": thread_id}))

    def save_messages(self, messages: Sequence[Message]) -> list[Message]:
        """Upsert complete messages by id in one statement.

        An existing message keeps its ``created_at`` and insertion order; every thread touched
        gets ``updated_at = now``. A batch that repeats an id keeps the last occurrence.
        """
        if not messages:
            return []
        latest = list({m.id: m for m in messages}.values())
        params = message_params(latest)
        rows = self._write("SAVE_MESSAGES", params, "u", lambda rows: [r[0] for r in rows])
        return as_stored(latest, params["times"], {r[0]: r[1] for r in rows})

    def save_turn(self, messages: Sequence[Message]) -> tuple[list[Message], dict[str, Thread]]:
        """Save messages with their threads in one statement (``Storage.save_turn``): missing
        threads created, every thread's ``updated_at`` set, the change-feed entry written."""
        if not messages:
            return [], {}
        latest = list({m.id: m for m in messages}.values())
        params = message_params(latest)
        rows = self._write("SAVE_TURN", params, "u", lambda rows: [r[1] for r in rows if r[0] == "m"])
        missing = {r[1] for r in rows if r[0] == "x"}
        if missing:
            raise missing_thread(next(m.thread_id for m in latest if m.thread_id in missing))
        threads = {r[1]: thread_of(r[1:7]) for r in rows if r[0] == "t"}
        stored = as_stored(owned(latest, threads), params["times"],
                            {r[1]: r[7] for r in rows if r[0] == "m"})
        return stored, threads

    def delete_messages(self, ids: Iterable[str]) -> list[str]:
        """Delete messages by id; unknown ids are ignored. Returns the ids that existed."""
        wanted = list(dict.fromkeys(ids))
        if not wanted:
            return []
        rows = self._write("DELETE_MESSAGES", {"ids": wanted, "now": utc_now()}, "d",
                           lambda rows: [r[0] for r in rows])
        gone = {r[0] for r in rows}
        return [i for i in wanted if i in gone]

    # ----------------------------------------------------------------------------- recall's reads

    def page(self, thread_id: str, *, resource_id: str | None = None, start: int | None = None,
             start_exclusive: bool = False, end: int | None = None, end_exclusive: bool = False,
             metadata: Mapping[str, Any] | None = None, descending: bool = False, offset: int = 0,
             limit: int | None = None, after_id: str | None = None,
             before_id: str | None = None) -> tuple[list[MessageRow], int]:
        """Rows of one thread and how many pass the filters, by ``Timeline.page``'s rules, in
        one statement."""
        rows, total = self._page(thread_id, resource_id, start, start_exclusive, end, end_exclusive,
                                 metadata, descending, offset, limit, after_id, before_id, None)
        return [(r[0], r[1], r[2], r[3], r[4], payload(r[5], r[6], r[7], r[8])) for r in rows], total

    def owned_page(self, thread_id: str, check_owner: Callable[[str | None], None] | None, *,
                   resource_id: str | None = None, start: int | None = None,
                   start_exclusive: bool = False, end: int | None = None,
                   end_exclusive: bool = False, metadata: Mapping[str, Any] | None = None,
                   descending: bool = False, offset: int = 0, limit: int | None = None,
                   after_id: str | None = None,
                   before_id: str | None = None) -> tuple[list[ColumnRow], int]:
        """``page()`` as recall reads it: the rows as ``ColumnRow`` (their stored columns, for
        ``messages_of``), and, when ``check_owner`` is given, the resource of the thread read
        by the same statement: ``check_owner`` gets it (``None`` when there is no such
        thread) before any error about the cursors is raised or any row is returned."""
        return self._page(thread_id, resource_id, start, start_exclusive, end, end_exclusive,
                          metadata, descending, offset, limit, after_id, before_id, check_owner)

    def _page(self, thread_id: str, resource_id: str | None, start: int | None,
              start_exclusive: bool, end: int | None, end_exclusive: bool,
              metadata: Mapping[str, Any] | None, descending: bool, offset: int,
              limit: int | None, after_id: str | None, before_id: str | None,
              check_owner: Callable[[str | None], None] | None) -> tuple[list[ColumnRow], int]:
        if metadata is not None:
            _core.validate_metadata_filter(metadata)
        offset = checked_count("offset", offset)
        if limit is not None:
            limit = checked_count("limit", limit)
        forward = True if after_id is not None else False if before_id is not None else not descending
        shape = (resource_id is not None, None if start is None else (">" if start_exclusive else ">="),
                 None if end is None else ("<" if end_exclusive else "<="), bool(metadata),
                 after_id is not None, before_id is not None, forward, check_owner is not None,
                 start is None and end is None and not metadata and after_id is None
                 and before_id is None and resource_id != "")
        query = self._pages.get(shape)
        if query is None:
            query = self._pages[shape] = self._text(q.page(
                resource=shape[0], start=shape[1], end=shape[2], metadata=shape[3],
                after=shape[4], before=shape[5], forward=forward, owner=shape[7],
                stored_total=shape[8]))
        found = self._read(query, {
            "thread": thread_id, "resource": resource_id, "start": start, "end": end,
            "filter": filter_value(metadata) if metadata else None, "after": after_id,
            "before": before_id, "offset": offset, "limit": limit})
        # The counts' row has no message id (``q.page``) and comes first, as PostgreSQL runs
        # the branches of a UNION ALL in order; the page's rows are ``ColumnRow``s.
        counts = found[0]
        if counts[0] is None:
            rows = found[1:]
        else:
            counts = next(r for r in found if r[0] is None)
            rows = [r for r in found if r[0] is not None]
        _, _, owner, total, cursors = counts[:5]
        if check_owner is not None:
            check_owner(owner)
        if cursors != 3:
            for bit, cursor in ((1, after_id), (2, before_id)):
                if not cursors & bit:
                    raise InvalidArgumentError(f"no message with id {cursor} in thread {thread_id}")
        if forward == descending:
            rows.reverse()
        return rows, total  # type: ignore[return-value]

    def window(self, includes: Sequence[tuple[str, int, int]],
               resource_id: str | None = None) -> list[MessageRow]:
        """Each ``(id, before, after)`` message with up to that many neighbours of its thread
        (of ``resource_id`` only, when given), de-duplicated, oldest first."""
        ids, before, after = [], [], []
        for mid, nb, na in includes:
            ids.append(mid)
            before.append(checked_count("before", nb))
            after.append(checked_count("after", na))
        if not ids:
            return []
        query = self._sql[f"WINDOW_{resource_id is not None}"]
        return self._rows(query, {"ids": ids, "before": before, "after": after, "resource": resource_id})

    def owned_window(self, thread_id: str, includes: Sequence[tuple[str, int, int]],
                     resource_id: str | None = None, *,
                     freshness: Any = None) -> tuple[str | None, list[MessageRow]]:
        """The resource of thread ``thread_id`` (``None`` when there is no such thread) and
        ``window(includes, resource_id)``, in one statement; with a vector index's
        ``freshness`` check (its ``sql``: rows with the id NULL and the fourth column set),
        that check's rows too, handed to its ``observe``."""
        if not includes and freshness is None:
            thread = self.get_thread(thread_id)
            return (None if thread is None else thread.resource_id), []
        ids, before, after = [], [], []
        for mid, nb, na in includes:
            ids.append(mid)
            before.append(checked_count("before", nb))
            after.append(checked_count("after", na))
        query = self._sql[f"OWNED_WINDOW_{resource_id is not None}"]
        params = {"ids": ids, "before": before, "after": after, "resource": resource_id,
                  "thread": thread_id}
        if freshness is not None:
            query = f"{query} UNION ALL ({freshness.sql})"
            params.update(freshness.params)
        found = self._read(query, params)
        if freshness is not None:
            freshness.observe([r for r in found if r[0] is None and r[3] is not None])
        owner = next((r[2] for r in found if r[0] is None and r[3] is None), None)
        return owner, [r for r in found if r[0] is not None]  # type: ignore[misc]

    # ----------------------------------------------------------------------------- change feed

    def changes_since(self, position: int) -> Changes:
        """The message writes of the transactions that committed at or above ``position`` (0:
        since the beginning) and that this object has not already handed out on the way to
        it: each id's state as it is now. Committed state only, even when called inside a
        transaction.

        The position returned is a watermark: every transaction below it had ended when the
        feed was read, so nothing that commits later can land below it. The transactions
        above it that had already committed are remembered, for the next call from that
        position only, so they are handed out once; any other position gets them again
        (harmless: rows are as they are now)."""
        known = self._ahead[1] if self._ahead[0] == position else frozenset()
        rows = self._committed(self._sql["CHANGES_SINCE"], {"position": position, "known": list(known)},
                               rows=True)
        head, reset = next((r[4], r[5]) for r in rows if r[0] == "h")
        ahead = frozenset(r[4] for r in rows if r[0] == "a")
        with self._feed_lock:  # reads that end at the same watermark keep what all of them saw
            if head == self._ahead[0]:
                self._ahead = (head, self._ahead[1] & ahead)
            elif head > self._ahead[0]:
                self._ahead = (head, ahead)
        if reset:
            return Changes(head, reset=True)
        upserted = sorted((r[1:] for r in rows if r[0] == "u"), key=itemgetter(4))
        return Changes(head, upserted, [r[1] for r in rows if r[0] == "d"],
                       [r[1] for r in rows if r[0] == "t"])

    def prune_changes(self, keep: int | None = None) -> None:
        """Drop the change-feed entries more than ``keep`` (default ``keep_changes``) positions
        behind its head. A reader left behind them rebuilds from a scan instead of missing a
        change. Every thousandth write of this object calls it (``_tidy``)."""
        keep = self.keep_changes if keep is None else checked_count("keep", keep)
        self._committed(self._sql["PRUNE_CHANGES"], {"keep": keep}, rows=False)

    def _tidy(self) -> None:
        """Prune the change feed and fold the message counts' per-process rows."""
        self.prune_changes()
        self._committed(self._sql["FOLD_COUNTS"], {}, rows=False)

    def scan_messages(self, batch: int = 50_000) -> Iterator[list[MessageRow]]:
        """Every stored message, in batches, in insertion order (one snapshot)."""
        with self._connection() as conn, conn.transaction():
            cur = conn.cursor(name="threadrecall_scan")
            cur.itersize = batch
            cur.execute(self._sql["SCAN_MESSAGES"])
            while chunk := cur.fetchmany(batch):
                yield chunk

    # ----------------------------------------------------------------------------- replica

    @property
    def replica(self) -> Replica:
        """The messages in memory, for lexical and hybrid recall: built on first use, then
        caught up with the change feed (one round trip) on every access."""
        with self._replica_lock:
            if self._replica is None:
                self._replica = Replica()
        self._replica.catch_up(self)
        return self._replica

    def lexical(self) -> _core.LexicalIndex:
        """The replica's BM25 index, built on the first call (a later catch-up replays what
        committed during the build)."""
        return self.replica.lexical(self.scan_messages, contextlib.nullcontext)

    def _committed(self, query: str, params: Mapping[str, Any], *, rows: bool) -> list[tuple[Any, ...]]:
        """One statement on a pooled connection of its own, outside any open transaction."""
        if loop_bridge.awaiting():
            return loop_bridge.wait(self._apools.fetch(query, params, rows=rows))
        with self._connection() as conn:
            return _execute(conn, query, params, rows=rows)

    def _rows(self, query: str, params: Mapping[str, Any]) -> list[MessageRow]:
        return self._fetch(query, params)  # type: ignore[return-value]  # selected as MessageRow


def _execute(conn: psycopg.Connection | psycopg.AsyncConnection, query: str,
             params: Mapping[str, Any], *, rows: bool = True,
             binary: bool = False) -> list[tuple[Any, ...]]:
    """Run one statement on ``conn`` (awaited on an async connection) and fetch its rows;
    ``rows=False`` leaves the result unread (in pipeline mode: no round trip of its own)."""
    if isinstance(conn, psycopg.AsyncConnection):
        return loop_bridge.wait(fetch(conn, query, params, rows=rows, binary=binary))
    cursor = conn.execute(query, params, binary=binary)
    return cursor.fetchall() if rows else []


@contextmanager
def _as_is(manager: Any) -> Iterator[Any]:
    """A blocking context manager entered as it is (the counterpart of ``entered``)."""
    with manager as value:
        yield value
