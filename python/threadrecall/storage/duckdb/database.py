"""One DuckDB database shared by the stores of a process: transactions, cursors, commit hooks.

DuckDB allows one writer at a time per database. Writes are serialised by a re-entrant lock,
and everything inside the outermost ``transaction()`` is one DuckDB transaction: it lands whole
or not at all. Reads use a cursor per Python thread. Work that must follow a successful commit
(updating in-memory indexes) is registered with ``on_commit``.

``BEGIN`` is sent before a transaction's first statement, not when it opens, and a statement
whose result nobody reads can be ``defer``-red to the transaction's next statement or its end:
a transaction that runs nothing costs nothing, and one whose only statement is deferred runs
it alone in DuckDB's auto-commit, which spares the ``BEGIN`` and ``COMMIT`` statements (about
half a millisecond of a one-message save) and commits just as durably. Rows deferred with
``defer_rows`` into the same table right after each other join one ``INSERT``: the writes of a
group commit then cost DuckDB one statement, not one each. Rows of plain values (every
placeholder a bare ``?``) go in through the cursor's appender of the table rather than as an
``INSERT`` statement: the same rows in the same transaction (or, alone, in one auto-commit of
their own), without the statement's parsing and planning (17-20 % of a one-row insert's CPU
time in memory, about 8 % on a file, where the commit's own write and ``fdatasync`` remain).

A file-backed database keeps a journal beside it (``<path>.journal``, ``journal.py``). A
transaction whose only work is rows deferred with ``journal=True`` (inserts the caller knows
cannot fail: new keys, every value set) commits by appending them to the journal, one write and
one ``fdatasync``, about a fifth of the CPU time of DuckDB's commit of the same row; its commit
hooks run then. The journalled rows reach DuckDB later, in one transaction that also records
the number of the last record applied (table ``journal_applied``), after which the journal is
emptied (``settle``): before any statement that is not a deferred write (so every read and
every other write sees them), when the journal holds ``JOURNAL_BYTES``, and at close. Opening
the database applies the records a process that stopped left past that number; a record torn
by a crash was never acknowledged, and is dropped. Writes that could fail at apply time (an
upsert, a statement) take the path above, after the journal has been applied.

``grouped(job)`` is a group commit: writes that arrive while another write holds the lock
queue up, and the next to get the lock runs every queued job in one transaction, so they share
one commit. Each caller still returns only once its own job has committed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import duckdb

from ...errors import ConfigurationError, StorageError
from .journal import Journal, decode, encode

__all__ = ["Database"]

R = TypeVar("R")

# Write-ahead log size that triggers a checkpoint. DuckDB's 16 MB default checkpoints every few
# batches of messages and rewrites the same partly filled row groups each time; 128 MB writes
# them a few times less (about 7 % less work for a 100k-message import) at the cost of up to
# 128 MB of log to replay when a database is reopened after a crash.
CHECKPOINT_THRESHOLD = "128MB"

# DuckDB's worker threads. One spares the thread pool's hand-offs of every small statement
# (about 30 % of the CPU time of a commit of a thread update and a message, measured side by
# side) and costs bulk reads about 15 %: those take ``all_threads()``.
THREADS = 1

# Rows one merged ``INSERT ... VALUES`` takes at most (larger batches come as Arrow scans).
MERGED_ROWS = 64

# Journalled bytes that make the journal's records due for DuckDB without waiting for a read:
# about a thousand one-message saves, applied for 0.02-0.03 ms of CPU each (a batch of ten
# costs 0.6-0.9 ms each, of one 4-11 ms) in a pause of 20-30 ms; four times as many halve
# that share again but pause a save four times as long.
JOURNAL_BYTES = 256 << 10

# Bytes of zeros the journal file is given when it is opened, so that its records overwrite
# blocks it has instead of growing it (``journal.py``): the usual journal and its last record.
JOURNAL_RESERVE = JOURNAL_BYTES + (64 << 10)

# The journals open in this process, by database path: a second ``Database`` of a path open at
# the same time keeps none (it would replay what the first has not applied yet).
_JOURNALS: set[str] = set()
_JOURNALS_LOCK = threading.Lock()


class Database:
    """A DuckDB database file (or ``:memory:``) with serialised write transactions."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        if self.path != ":memory:":
            _check_database_file(Path(self.path))
        try:
            self._conn = duckdb.connect(self.path, config={"checkpoint_threshold": CHECKPOINT_THRESHOLD,
                                                           "threads": THREADS})
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise ConfigurationError(
                    f"the database {self.path} is open for writing in another process; "
                    "DuckDB lets one process use a database file at a time; to share one memory "
                    "between processes, use PostgresStorage"
                ) from exc
            raise StorageError(f"cannot open the database {self.path}: {exc}") from exc
        except duckdb.Error as exc:
            raise StorageError(f"cannot open the database {self.path}: {exc}") from exc
        self._lock = threading.RLock()
        self._local = threading.local()
        self._depth = 0
        self._pending: list[Callable[[], object]] = []
        self._scratch: dict[str, Any] = {}
        self._writer: _Writer | None = None
        self._write_cursor: duckdb.DuckDBPyConnection | None = None  # one for every transaction: a new one costs
        self._appenders: dict[str, Any] = {}  # the write cursor's, by table
        self._owner: int | None = None
        self._joined = _Joined(self)
        self._queue: list[_Job] = []
        self._queue_lock = threading.Lock()
        self._journal: Journal | None = None
        self._journalled: list[_Rows] = []  # acknowledged, not yet applied to DuckDB
        self._journal_number = 0  # of the last record written
        # Guards the three above and applies them on a cursor of its own: a read that applies
        # the journal never waits for the write lock (whose holder may wait on the reader).
        self._journal_lock = threading.Lock()
        self._apply_cursor: duckdb.DuckDBPyConnection | None = None
        self._apply_appenders: dict[str, Any] = {}
        if not self.in_memory:
            self._open_journal()

    def _open_journal(self) -> None:
        """Open the journal and apply what a process that stopped left in it."""
        key = str(Path(self.path).resolve())
        with _JOURNALS_LOCK:
            if key in _JOURNALS:
                return
            _JOURNALS.add(key)
        self._journal_key = key
        try:
            with self.transaction() as tx:
                tx.execute("CREATE TABLE IF NOT EXISTS journal_applied (id INTEGER PRIMARY KEY, "
                           "number BIGINT NOT NULL)")
                tx.execute("INSERT OR IGNORE INTO journal_applied VALUES (0, 0)")
            (applied,) = self.cursor().execute("SELECT number FROM journal_applied WHERE id = 0").fetchall()[0]
            journal = Journal(f"{self.path}.journal", reserve=JOURNAL_RESERVE)
            records = [(n, body) for n, body in journal.records() if n > applied]
            if records and records[0][0] != applied + 1:
                raise StorageError(
                    f"the journal {journal.path} starts at record {records[0][0]} but the database "
                    f"{self.path} has applied up to {applied}: records are missing")
            self._journal, self._journal_number = journal, applied
            for number, body in records:
                self._journalled.extend(_Rows(t, r, v) for t, r, v in decode(body))
                self._journal_number = number
            self.settle()
            journal.clear()
        except BaseException:
            with _JOURNALS_LOCK:
                _JOURNALS.discard(key)
            if self._journal is not None:
                self._journal.close()
                self._journal = None
            self._conn.close()
            raise

    @property
    def in_memory(self) -> bool:
        return self.path == ":memory:"

    @property
    def in_transaction(self) -> bool:
        """Whether this thread is inside ``transaction()`` (reads may see uncommitted rows)."""
        return self._writer is not None and self._owner == threading.get_ident()

    @property
    def lock(self) -> threading.RLock:
        """The lock every write transaction holds (and commit callbacks run under)."""
        return self._lock  # type: ignore[return-value]

    @property
    def scratch(self) -> dict[str, Any]:
        """Notes about the open transaction's own writes, dropped when it commits or rolls back."""
        return self._scratch

    def cursor(self) -> Any:
        """This thread's read cursor (inside a transaction: the transaction's connection),
        once the journalled writes are applied."""
        if self.in_transaction:
            return self._writer  # type: ignore[return-value]
        if self._journalled:
            self.settle()
        cur = getattr(self._local, "cursor", None)
        if cur is None:
            cur = self._local.cursor = self._conn.cursor()
        return cur

    def transaction(self) -> Any:
        """Serialise a write; nested calls join the outermost transaction. It yields the
        transaction's connection (``execute``, ``sql``, ``register``... as on a DuckDB one)."""
        # Only the owner of the lock sees its own ident there: a nested call joins at once.
        if self._depth and self._owner == threading.get_ident():
            return self._joined
        return self._outermost()

    @contextmanager
    def _outermost(self) -> Iterator[Any]:
        with self._lock:  # held, no other thread's transaction is open (nested ones joined above)
            if self._write_cursor is None:
                self._write_cursor = self._conn.cursor()
            writer = self._writer = _Writer(self._write_cursor, self._appenders, self.settle,
                                            self._journal_append if self._journal else None)
            self._owner = threading.get_ident()
            self._depth = 1
            try:
                yield writer
                writer.finish()
            except BaseException as exc:
                self._pending.clear()
                writer.abort()
                if isinstance(exc, duckdb.Error) and _is_io_failure(exc):
                    raise StorageError(f"writing the database {self.path} failed: {exc}") from exc
                raise
            finally:
                self._depth = 0
                self._writer = self._owner = None
                self._scratch = {}
            pending, self._pending = self._pending, []
            for callback in pending:
                callback()
            if self._journal is not None and self._journal.size >= JOURNAL_BYTES:
                try:
                    self.settle()
                except StorageError:  # acknowledged and kept: the next read or write raises it
                    pass

    def settle(self) -> None:
        """Apply the journalled writes to DuckDB, in one transaction that also records the
        number of the last record applied, and empty the journal. Every statement that is not
        a deferred write runs after this. If applying fails, the writes stay in the journal
        (and in memory, to apply again), and ``StorageError`` says why.

        >>> import tempfile
        >>> db = Database(Path(tempfile.mkdtemp()) / "m.duckdb")
        >>> with db.transaction() as tx:
        ...     _ = tx.execute("CREATE TABLE t (x INTEGER)")
        >>> with db.transaction():
        ...     db.defer_rows("t", "(?)", [1, 2], journal=True)
        >>> len(db._journalled), db.fetch_one("SELECT count(*) FROM t"), len(db._journalled)
        (1, (2,), 0)
        >>> db.close()
        """
        # Rows are journalled only by a write transaction that has sent no statement, and one
        # that sends a statement applies them first: none are pending while a DuckDB
        # transaction of the writer is open, so this one never overlaps it.
        if not self._journalled:
            return
        with self._journal_lock:
            if not self._journalled:
                return
            if self._apply_cursor is None:
                self._apply_cursor = self._conn.cursor()
            cursor = self._apply_cursor
            rows = _merged(self._journalled)
            try:
                cursor.execute("BEGIN TRANSACTION")
                for entry in rows:
                    entry.run(cursor, self._apply_appenders)
                cursor.execute("UPDATE journal_applied SET number = ? WHERE id = 0", [self._journal_number])
                cursor.execute("COMMIT")
            except BaseException as exc:  # an interrupt too: the write cursor's transaction ends
                try:
                    cursor.execute("ROLLBACK")
                except duckdb.Error:
                    pass
                if not isinstance(exc, duckdb.Error):
                    raise
                raise StorageError(f"applying the journal of {self.path} to the database failed "
                                   f"(its writes are kept and applied again): {exc}") from exc
            self._journalled = []
            assert self._journal is not None
            self._journal.clear()

    def _journal_append(self, rows: list[_Rows]) -> bool:
        """Make ``rows`` durable in the journal, to apply later; False (nothing written) when
        a value cannot be journalled exactly."""
        assert self._journal is not None
        try:
            payload = encode([(r.table, r.row, r.values) for r in rows])
        except (TypeError, ValueError):
            return False
        with self._journal_lock:
            self._journal_number = self._journal.append(self._journal_number + 1, payload)
            self._journalled.extend(rows)
        return True

    @contextmanager
    def all_threads(self) -> Iterator[None]:
        """Let DuckDB use every core (for a bulk read, e.g. rebuilding the replica at open),
        then go back to ``THREADS``.

        >>> db = Database()
        >>> with db.all_threads():
        ...     db.fetch_one("SELECT current_setting('threads')")[0] == (os.cpu_count() or 1)
        True
        >>> db.fetch_one("SELECT current_setting('threads')")[0] == THREADS
        True
        """
        self.cursor().execute(f"SET threads = {max(os.cpu_count() or 1, THREADS)}")
        try:
            yield
        finally:
            self.cursor().execute(f"SET threads = {THREADS}")

    def defer(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run a write whose result is not needed in the open transaction, before its next
        statement or when it ends; an error it raises surfaces there, and the transaction
        rolls back as for any other. Outside a transaction it runs now, in one of its own.

        >>> db = Database()
        >>> with db.transaction() as tx:
        ...     _ = tx.execute("CREATE TABLE t (x INTEGER)")
        >>> with db.transaction():
        ...     db.defer("INSERT INTO t VALUES (?)", [7])
        >>> db.fetch_one("SELECT x FROM t")
        (7,)
        """
        with self.transaction() as tx:
            tx.defer(sql, params)

    def defer_rows(self, table: str, row: str, params: Sequence[Any], *, journal: bool = False) -> None:
        """``defer`` an ``INSERT INTO table VALUES row, row, ...`` of ``params`` (flat, one
        value per placeholder of ``row``). Rows deferred into the same table with the same
        ``row`` right after each other become one statement, which DuckDB runs for little
        more than the cost of one.

        ``journal=True`` vouches that the insert cannot fail (no key it could repeat, every
        ``NOT NULL`` column set, every value of its column's type): a transaction whose only
        work is such rows commits by appending them to the journal beside the file, one write
        and ``fdatasync``, and DuckDB takes them later (``settle``).

        >>> db = Database()
        >>> with db.transaction() as tx:
        ...     _ = tx.execute("CREATE TABLE t (x INTEGER, y TEXT)")
        >>> with db.transaction() as tx:
        ...     db.defer_rows("t", "(?, ?)", [1, "a"])
        ...     db.defer_rows("t", "(?, ?)", [2, "b", 3, "c"])
        ...     len(tx.deferred)
        1
        >>> db.cursor().execute("SELECT x, y FROM t ORDER BY x").fetchall()
        [(1, 'a'), (2, 'b'), (3, 'c')]
        """
        with self.transaction() as tx:
            tx.defer_rows(table, row, params, journal)

    def grouped(self, job: Callable[[], R]) -> R:
        """Run ``job`` in one transaction with the other grouped jobs waiting for the write
        lock at the same time, and return its result once that transaction has committed.

        ``job`` writes through ``transaction()`` and must be safe to run again: when a job of
        a group raises, the group is rolled back and each of its jobs is run again in a
        transaction of its own, in the order they came, so the error reaches the caller whose
        job raised it and the others commit without it. Inside an open transaction, ``job``
        simply joins it.

        >>> db = Database()
        >>> def job():
        ...     with db.transaction() as tx:
        ...         return tx.execute("SELECT 41 + 1").fetchall()[0][0]
        >>> db.grouped(job)
        42
        """
        if self.in_transaction:
            return job()
        mine = _Job(job)
        with self._queue_lock:
            self._queue.append(mine)
        # A job not done is in the queue or in the group the holder of the lock is running.
        while not mine.done:
            with self._lock:
                if mine.done:
                    break
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                try:
                    self._run_group(batch)
                except BaseException:  # an interrupt: the other callers run their jobs themselves
                    with self._queue_lock:
                        self._queue[:0] = [j for j in batch if not j.done and j is not mine]
                    raise
        return mine.outcome()

    def _run_group(self, batch: list[_Job]) -> None:
        if len(batch) > 1:
            try:
                with self.transaction():
                    results = [job.call() for job in batch]
            except Exception:  # noqa: BLE001 - each job runs again alone and gets its own error
                pass
            else:
                for job, result in zip(batch, results):
                    job.finish(result=result)
                return
        for job in batch:
            try:
                with self.transaction():
                    result = job.call()
            except Exception as exc:  # noqa: BLE001 - raised by its own caller
                job.finish(error=exc)
            else:
                job.finish(result=result)

    def on_commit(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` after the current transaction commits (now if none is open)."""
        with self._lock:
            if self._depth:
                self._pending.append(callback)
                return
        callback()

    def fetch_one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        """The first row of a query (the result is read to the end, as DuckDB requires)."""
        rows = self.cursor().execute(sql, params).fetchall()
        return rows[0] if rows else None

    def migrate(self, component: str,
                steps: Sequence[str | Callable[[duckdb.DuckDBPyConnection], None]]) -> None:
        """Bring ``component``'s tables forward: run the steps not yet applied, in order.

        ``steps[i]`` takes the component from version ``i`` to ``i + 1``: SQL text, or a
        function given the transaction's connection (for conversions SQL cannot express).
        Steps are only ever appended, never edited, so every database moves forward along
        the same path.
        """
        with self.transaction() as tx:
            tx.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
            )
            row = self.fetch_one("SELECT version FROM schema_version WHERE component = ?", [component])
            current = row[0] if row else 0
            for step in steps[current:]:
                if callable(step):
                    step(tx)
                else:
                    tx.execute(step)
            if current < len(steps):
                tx.execute(
                    "INSERT OR REPLACE INTO schema_version VALUES (?, ?)", [component, len(steps)]
                )

    def close(self) -> None:
        """Merge the write-ahead log into the file (a read-only session leaves a replayed log
        unmerged otherwise), then close."""
        with self._lock:
            if self._journal is not None:
                try:
                    self.settle()
                except StorageError:  # kept in the journal: the next open applies it
                    self._journal.close()
                else:
                    self._journal.close(remove=True)
                self._journal = None
                with _JOURNALS_LOCK:
                    _JOURNALS.discard(self._journal_key)
            self._appenders.clear()
            self._apply_appenders.clear()
            if not self.in_memory:
                try:
                    self._conn.execute("CHECKPOINT")
                except duckdb.Error:  # e.g. a full disk: the log stays and is replayed on open
                    pass
            self._conn.close()


class _Rows:
    """Rows deferred into one table right after each other, as flat values (one per
    placeholder of ``row``): one ``INSERT ... VALUES row, row, ...``, or, when every
    placeholder of ``row`` is a bare ``?``, the table's appender, whose flush applies them in
    the open transaction (or in an auto-commit of their own) without a statement to plan."""

    __slots__ = ("table", "row", "width", "values", "journal")

    def __init__(self, table: str, row: str, params: Sequence[Any], journal: bool = False) -> None:
        self.table, self.row, self.width = table, row, row.count("?")
        self.values = list(params)
        self.journal = journal  # the caller vouches that the insert cannot fail

    @property
    def count(self) -> int:
        return len(self.values) // self.width

    @property
    def sql(self) -> str:
        return f"INSERT INTO {self.table} VALUES " + ", ".join([self.row] * self.count)

    @property
    def plain(self) -> bool:
        """Whether every placeholder of ``row`` is a bare ``?`` (the rows can be appended)."""
        return self.row.replace(" ", "") == "(" + ",".join("?" * self.width) + ")"

    def run(self, cursor: duckdb.DuckDBPyConnection, appenders: dict[str, Any]) -> None:
        if not self.plain:
            cursor.execute(self.sql, self.values)
            return
        appender = appenders.get(self.table)
        if appender is None:
            appender = appenders[self.table] = cursor.appender(self.table)
        values, width = self.values, self.width
        appender.append_rows([values[i:i + width] for i in range(0, len(values), width)])
        try:
            appender.flush()
        except BaseException:
            appender.clear()  # nothing of a failed flush is kept for the next one
            raise


class _Writer:
    """The connection of an open transaction: ``BEGIN`` goes before its first statement and
    the deferred statements before any other, so reads see them; ``finish`` commits, and a
    transaction whose only statements are one deferred write runs it in auto-commit."""

    __slots__ = ("cursor", "appenders", "settle", "journal", "begun", "deferred")

    def __init__(self, cursor: duckdb.DuckDBPyConnection, appenders: dict[str, Any],
                 settle: Callable[[], None], journal: Callable[[list[_Rows]], bool] | None) -> None:
        self.cursor = cursor
        self.appenders = appenders
        self.settle = settle  # applies the journalled writes: before the first statement
        self.journal = journal  # makes rows durable in the journal (None: no journal)
        self.begun = False
        self.deferred: list[tuple[str, Sequence[Any]] | _Rows] = []

    def defer(self, sql: str, params: Sequence[Any]) -> None:
        self.deferred.append((sql, params))

    def defer_rows(self, table: str, row: str, params: Sequence[Any], journal: bool = False) -> None:
        last = self.deferred[-1] if self.deferred else None
        if (isinstance(last, _Rows) and (last.table, last.row, last.journal) == (table, row, journal)
                and last.count + len(params) // last.width <= MERGED_ROWS):
            last.values.extend(params)
            return
        self.deferred.append(_Rows(table, row, params, journal))

    def execute(self, sql: str, params: Any = None) -> duckdb.DuckDBPyConnection:
        self._ready()
        return self.cursor.execute(sql, params)

    def sql(self, query: str, **kwargs: Any) -> duckdb.DuckDBPyRelation:
        self._ready()
        return self.cursor.sql(query, **kwargs)

    def __getattr__(self, name: str) -> Any:  # register, unregister...: no statement
        return getattr(self.cursor, name)

    def _ready(self) -> None:
        if not self.begun:
            self.settle()
            self.cursor.execute("BEGIN TRANSACTION")
            self.begun = True
        while self.deferred:
            self._run(self.deferred.pop(0))

    def _run(self, deferred: tuple[str, Sequence[Any]] | _Rows) -> None:
        if isinstance(deferred, _Rows):
            deferred.run(self.cursor, self.appenders)
        else:
            self.cursor.execute(*deferred)

    def finish(self) -> None:
        if (not self.begun and self.deferred and self.journal is not None
                and all(isinstance(d, _Rows) and d.journal for d in self.deferred)
                and self.journal(self.deferred)):  # type: ignore[arg-type]
            self.deferred = []
            return
        if not self.begun and len(self.deferred) == 1:
            self.settle()
            self._run(self.deferred.pop())  # auto-commit: its own durable transaction
            return
        if self.begun or self.deferred:
            self._ready()
            self.cursor.execute("COMMIT")

    def abort(self) -> None:
        self.deferred.clear()
        if self.begun:
            try:
                self.cursor.execute("ROLLBACK")
            except duckdb.Error:  # a failed commit has already ended the transaction
                pass


def _merged(rows: list[_Rows]) -> list[_Rows]:
    """The same rows, those of one table appended together, in one appender flush per table.

    Journalled rows are inserts of keys new to their table, and no table refers to another
    (no foreign keys), so only the order within a table is kept: a journal that alternates
    between tables (a new thread, its messages, the next thread...) still applies in one
    flush per table, not one per record. A row that cannot be appended stays in its place.

    >>> merged = _merged([_Rows("t", "(?)", [1]), _Rows("u", "(?)", [2]), _Rows("t", "(?)", [3])])
    >>> [(r.table, r.values) for r in merged]
    [('t', [1, 3]), ('u', [2])]
    """
    merged: list[_Rows] = []
    groups: dict[tuple[str, str], _Rows] = {}
    for rows_ in rows:
        key = (rows_.table, rows_.row)
        group = groups.get(key)
        if group is not None:
            group.values.extend(rows_.values)
            continue
        copy = _Rows(rows_.table, rows_.row, list(rows_.values))
        if copy.plain:
            groups[key] = copy
        merged.append(copy)
    return merged


class _Joined:
    """A nested ``transaction()``: it joins the open transaction of the lock's owner."""

    __slots__ = ("db",)

    def __init__(self, db: Database) -> None:
        self.db = db

    def __enter__(self) -> Any:
        self.db._depth += 1
        return self.db._writer

    def __exit__(self, *exc: object) -> None:
        self.db._depth -= 1


class _Job:
    """A grouped write and, once its transaction has ended, its result or error."""

    __slots__ = ("call", "done", "result", "error")

    def __init__(self, call: Callable[[], Any]) -> None:
        self.call = call
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None

    def finish(self, *, result: Any = None, error: BaseException | None = None) -> None:
        self.result, self.error, self.done = result, error, True

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


# The first bytes of a DuckDB file: a checksum (8 bytes), then the magic ``DUCK``.
_MAGIC_AT, _MAGIC = 8, b"DUCK"


def _check_database_file(path: Path) -> None:
    """Refuse a path DuckDB would not store to: a directory, or an existing file that is not a
    DuckDB database (DuckDB would quietly open an in-memory database over some of them)."""
    if path.is_dir():
        raise ConfigurationError(f"{path} is a directory, not a database file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create the folder of the database {path}: {exc}") from exc
    if not path.exists() or path.stat().st_size == 0:
        return
    try:
        with path.open("rb") as file:
            head = file.read(_MAGIC_AT + len(_MAGIC))
    except OSError as exc:
        raise StorageError(f"cannot read the database {path}: {exc}") from exc
    if head[_MAGIC_AT:] != _MAGIC:
        raise ConfigurationError(
            f"{path} exists and is not a DuckDB database; give the path of a database file "
            "(or of one to create)")


def _is_io_failure(exc: duckdb.Error) -> bool:
    """Whether a DuckDB error comes from the file system (a full disk, a write refused...)."""
    return isinstance(exc, (duckdb.IOException, duckdb.FatalException)) or any(
        word in str(exc) for word in ("IO Error", "Could not write", "Could not read", "No space left",
                                      "File too large", "Permission denied"))
