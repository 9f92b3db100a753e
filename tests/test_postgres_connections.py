"""PostgresStorage's connections: the idle ones it keeps out of its pool between statements.

Lone statements reuse a kept connection instead of a pool checkout; these tests hold the
rules that make that safe: a transaction or ``connection()`` finds the kept connections
(one connection in all serves every kind of call), more threads than connections all get
one, a connection left in a transaction or broken goes back to the pool, and ``close()``
closes every connection kept. Recall's page reads run as statements prepared by name on
those connections: one deallocated meanwhile is prepared again, storage objects sharing a
pool read their own schemas, and a failed read raises psycopg's exception for it.
"""

from __future__ import annotations

import gc
import logging
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from psycopg_pool import PoolClosed

from threadrecall import Memory
from threadrecall.storage import PostgresStorage


def _turn(thread_id: str, n: int) -> list[dict]:
    return [{"id": f"{thread_id}-{n}-{k}", "thread_id": thread_id, "resource_id": "u", "role": role,
             "content": f"turn {n} {role}"} for k, role in enumerate(("user", "assistant"))]


def _count(dsn: str, schema: str, thread_id: str) -> int:
    """The thread's messages as another connection sees them (committed ones only)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(psycopg.sql.SQL("SELECT count(*) FROM {}.messages WHERE thread_id = %s")
                            .format(psycopg.sql.Identifier(schema)), [thread_id]).fetchone()[0]


def _backend(storage: PostgresStorage) -> int:
    with storage.connection() as conn:
        return conn.info.backend_pid


def _sessions(dsn: str, name: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                            [name]).fetchone()[0]


def test_one_connection_serves_lone_statements_transactions_and_connection(pg_dsn, pg_schema):
    storage = PostgresStorage(pg_dsn, schema=pg_schema, max_connections=1)
    memory = Memory(storage=storage)
    try:
        memory.save_messages(_turn("t1", 0))
        backend = _backend(storage)
        with memory.transaction():
            memory.save_messages(_turn("t1", 1))
            assert len(memory.recall("t1", per_page=False).messages) == 4
        with storage.connection() as conn:
            assert conn.info.backend_pid == backend
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert [m.id for m in memory.recall("t1", per_page=2).messages] == ["t1-1-0", "t1-1-1"]
        assert _backend(storage) == backend  # the one connection, kept between the calls
        assert _count(pg_dsn, pg_schema, "t1") == 4
    finally:
        storage.close()


def test_more_threads_than_connections_each_get_one(pg_dsn, pg_schema):
    storage = PostgresStorage(pg_dsn, schema=pg_schema, max_connections=2)
    memory = Memory(storage=storage)

    def work(t: int) -> int:
        for n in range(40):
            if n % 4 == 3:
                with memory.transaction():
                    memory.save_messages(_turn(f"t{t}", n))
            else:
                memory.save_messages(_turn(f"t{t}", n))
            assert memory.recall(f"t{t}", per_page=2).messages[-1].id == f"t{t}-{n}-1"
        return memory.recall(f"t{t}", per_page=False).total

    try:
        start = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            totals = list(pool.map(work, range(8)))
        assert totals == [80] * 8
        # A caller left waiting for the pool while the connections sat kept would wait for
        # the pool's timeout (30 s) and fail.
        assert time.monotonic() - start < 25
    finally:
        storage.close()


def test_a_connection_left_in_a_transaction_is_not_kept(pg_dsn, pg_schema):
    storage = PostgresStorage(pg_dsn, schema=pg_schema, max_connections=1)
    memory = Memory(storage=storage)
    try:
        with storage.connection() as conn:
            conn.execute("BEGIN")
            conn.execute("SELECT 1")
        memory.save_messages(_turn("t1", 0))
        assert _count(pg_dsn, pg_schema, "t1") == 2  # committed, not inside that transaction
    finally:
        storage.close()


def test_a_terminated_connection_is_replaced(pg_dsn, pg_schema):
    storage = PostgresStorage(pg_dsn, schema=pg_schema, max_connections=1)
    memory = Memory(storage=storage)
    try:
        memory.save_messages(_turn("t1", 0))
        backend = _backend(storage)
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s)", [backend]).fetchone() == (True,)
            for _ in range(100):
                gone = admin.execute("SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = %s)",
                                     [backend]).fetchone()[0]
                if gone:
                    break
                time.sleep(0.05)
        # The call on the dead connection fails, as on a pooled one; the pool replaces it.
        with pytest.raises(psycopg.OperationalError):
            memory.recall("t1")
        assert [m.id for m in memory.recall("t1").messages] == ["t1-0-0", "t1-0-1"]
        assert _backend(storage) != backend
    finally:
        storage.close()


def test_close_closes_every_kept_connection(pg_dsn, pg_schema):
    name = f"close-{pg_schema}"
    storage = PostgresStorage(make_conninfo(pg_dsn, application_name=name), schema=pg_schema,
                              max_connections=4)
    memory = Memory(storage=storage)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda t: [memory.recall(f"t{t}") for _ in range(50)], range(4)))
    assert _sessions(pg_dsn, name) >= 1
    storage.close()
    for _ in range(100):
        if _sessions(pg_dsn, name) == 0:
            break
        time.sleep(0.05)
    assert _sessions(pg_dsn, name) == 0
    with pytest.raises(PoolClosed):
        memory.recall("t1")


def test_a_page_statement_deallocated_meanwhile_is_prepared_again(pg_dsn, pg_schema):
    storage = PostgresStorage(pg_dsn, schema=pg_schema, max_connections=1)
    memory = Memory(storage=storage)
    try:
        memory.save_messages(_turn("t1", 0))
        assert [m.id for m in memory.recall("t1", per_page=1).messages] == ["t1-0-1"]
        with storage.connection() as conn:
            named = conn.execute("SELECT count(*) FROM pg_prepared_statements "
                                 "WHERE name LIKE 'threadrecall_%'").fetchone()[0]
            assert named >= 1  # the page ran as a statement prepared by name
            conn.execute("DEALLOCATE ALL")
        memory.save_messages(_turn("t1", 1))
        result = memory.recall("t1", per_page=1)
        assert [m.id for m in result.messages] == ["t1-1-1"]
        assert (result.total, result.has_more) == (4, True)
    finally:
        storage.close()


def test_storages_sharing_a_pool_read_their_own_schemas(pg_dsn, pg_schema):
    from psycopg_pool import ConnectionPool

    other = f"{pg_schema}_b"
    pool = ConnectionPool(pg_dsn, min_size=1, max_size=1, kwargs={"autocommit": True}, open=True)
    try:
        first = Memory(storage=PostgresStorage(pool, schema=pg_schema))
        second = Memory(storage=PostgresStorage(pool, schema=other))
        twin = Memory(storage=PostgresStorage(pool, schema=pg_schema))  # the same statements' texts
        first.save_messages(_turn("t1", 0))
        second.save_messages([{**m, "content": "other"} for m in _turn("t1", 5)])
        for _ in range(3):
            assert [m.id for m in first.recall("t1", per_page=2).messages] == ["t1-0-0", "t1-0-1"]
            assert [m.text for m in second.recall("t1", per_page=2).messages] == ["other", "other"]
            assert [m.id for m in twin.recall("t1", per_page=2).messages] == ["t1-0-0", "t1-0-1"]
    finally:
        pool.close()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE")
                         .format(psycopg.sql.Identifier(other)))


def test_a_failed_page_read_raises_as_psycopg_does_and_the_connection_serves_on(pg_dsn, pg_schema):
    dsn = make_conninfo(pg_dsn, options="-c lock_timeout=200ms")
    storage = PostgresStorage(dsn, schema=pg_schema, max_connections=1)
    memory = Memory(storage=storage)
    try:
        memory.save_messages(_turn("t1", 0))
        memory.recall("t1")
        backend = _backend(storage)
        with psycopg.connect(pg_dsn) as admin:  # holds the table's lock until the block ends
            admin.execute(psycopg.sql.SQL("LOCK TABLE {}.messages IN ACCESS EXCLUSIVE MODE")
                          .format(psycopg.sql.Identifier(pg_schema)))
            with pytest.raises(psycopg.errors.LockNotAvailable):
                memory.recall("t1")
        assert [m.id for m in memory.recall("t1").messages] == ["t1-0-0", "t1-0-1"]
        assert _backend(storage) == backend
    finally:
        storage.close()


def test_connections_that_prepare_nothing_read_pages_unprepared(pg_dsn, pg_schema):
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(pg_dsn, min_size=1, max_size=1, open=True,
                          kwargs={"autocommit": True, "prepare_threshold": None})
    try:
        memory = Memory(storage=PostgresStorage(pool, schema=pg_schema))
        memory.save_messages(_turn("t1", 0))
        for _ in range(10):
            assert memory.recall("t1", per_page=1).total == 2
        with pool.connection() as conn:
            assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (0,)
    finally:
        pool.close()


def test_connections_the_pool_closed_are_not_kept_alive(pg_dsn, pg_schema):
    from psycopg_pool import ConnectionPool

    # The pool logs each closed connection it discards, with the connection in the record,
    # which pytest's log capture keeps.
    pool_log = logging.getLogger("psycopg.pool")
    pool = ConnectionPool(pg_dsn, min_size=1, max_size=1, kwargs={"autocommit": True}, open=True)
    try:
        pool_log.disabled = True
        memory = Memory(storage=PostgresStorage(pool, schema=pg_schema))
        closed = []
        for n in range(5):
            memory.save_messages(_turn("t1", n))
            with pool.connection() as conn:  # the one the save ran on: closed, the pool replaces it
                closed.append(weakref.ref(conn))
                conn.close()
            del conn
        memory.save_messages(_turn("t1", 5))
        assert memory.recall("t1", per_page=False).total == 12
        gc.collect()
        assert [ref() for ref in closed] == [None] * 5
    finally:
        pool_log.disabled = False
        pool.close()


def test_a_nul_in_a_read_value_is_refused_not_cut_short(pg_dsn, pg_schema):
    """libpq passes text parameters as C strings: a value with a NUL would end there ("t1\\0x"
    read as "t1"). Such reads go through psycopg, which refuses them as for any statement
    (``Memory`` refuses a NUL in an id before it reads)."""
    storage = PostgresStorage(pg_dsn, schema=pg_schema)
    memory = Memory(storage=storage)
    try:
        memory.save_messages(_turn("t1", 0))
        for call in (lambda: storage.page("t1\x00x"),
                     lambda: storage.owned_window("t1", [("t1-0-0\x00x", 1, 1)], "u")):
            with pytest.raises(psycopg.DataError):
                call()
        assert memory.recall("t1").total == 2
    finally:
        storage.close()
