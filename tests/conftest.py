from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

import pytest

from threadrecall import Memory
from threadrecall.storage import DuckDBStorage

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)


def kill_after_acks(script: str, db, acks: int) -> int:
    """Run ``script`` on ``db`` in a child Python that prints a number after each batch it
    has written; SIGKILL it once it has acknowledged ``acks``; return the last number it
    printed (it may have run ahead of the reader: the lines still in the pipe count too)."""
    child = subprocess.Popen([sys.executable, "-c", script, str(db)], stdout=subprocess.PIPE, text=True)
    acked = -1
    while acked < acks:
        line = child.stdout.readline()
        assert line, "the writer died on its own"
        acked = int(line)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    for line in child.stdout:
        if line.endswith("\n"):  # a whole line: the batch before it was acknowledged
            acked = int(line)
    child.stdout.close()
    return acked


@pytest.fixture(scope="session")
def pg_dsn():
    """A PostgreSQL DSN: ``THREADRECALL_TEST_PG_DSN`` when set, else a server started for the
    session (and stopped at its end). Under CI a server that cannot start fails the tests."""
    given = os.environ.get("THREADRECALL_TEST_PG_DSN")
    if given:
        yield given
        return
    from postgres_server import PostgresServer

    server = PostgresServer()
    try:
        server.start()
    except Exception as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            raise
        pytest.skip(f"no PostgreSQL server could be started: {exc}")
    yield server.dsn
    server.stop()


@pytest.fixture
def pg_schema(pg_dsn):
    """A schema name no other test uses; the schema is dropped after the test."""
    import psycopg

    name = f"test_{uuid.uuid4().hex[:16]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET lock_timeout = '20s'")
        conn.execute(psycopg.sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(psycopg.sql.Identifier(name)))


@pytest.fixture(params=["duckdb", "postgres"])
def storage(request, tmp_path):
    """The storage every acceptance test runs on: a DuckDB file, then a PostgreSQL schema."""
    if request.param == "duckdb":
        store = DuckDBStorage(tmp_path / "memory.duckdb")
    else:
        from threadrecall.storage import PostgresStorage

        store = PostgresStorage(request.getfixturevalue("pg_dsn"),
                                schema=request.getfixturevalue("pg_schema"))
    yield store
    store.close()


@pytest.fixture
def memory(storage):
    return Memory(storage=storage)


class RecallStore(NamedTuple):
    """Where semantic recall keeps its messages and its vectors."""

    storage: Any
    vector: Any


@pytest.fixture(params=["duckdb+hnsw", "postgres+hnsw", "postgres+pgvector"])
def recall_store(request, tmp_path):
    """The three combinations semantic recall runs on: the HNSW index over a DuckDB file, the
    HNSW index as a per-process cache of vector rows in PostgreSQL, and PgVector (pgvector's
    HNSW inside PostgreSQL)."""
    from threadrecall.vector import HnswVectorStore

    database, vectors = request.param.split("+")
    if database == "duckdb":
        store = DuckDBStorage(tmp_path / "memory.duckdb")
    else:
        from threadrecall.storage import PostgresStorage

        store = PostgresStorage(request.getfixturevalue("pg_dsn"),
                                schema=request.getfixturevalue("pg_schema"))
    if vectors == "hnsw":
        vector = HnswVectorStore(store)
    else:
        from threadrecall.vector import PgVector

        vector = PgVector(store)
    yield RecallStore(store, vector)
    vector.close()
    store.close()


@pytest.fixture
def recall_memory(recall_store):
    """``Memory(**options)`` on the ``recall_store`` combination's storage and vector store."""
    def make(**options):
        return Memory(storage=recall_store.storage, vector=recall_store.vector, **options)
    return make


def seed(memory, thread_id, count, *, resource_id="r1", prefix="Message", start=T0, step=60,
         first=1, roles=("user", "assistant"), metadata=None):
    """Save ``count`` messages "<prefix> <i>" one ``step`` seconds apart; return them."""
    if memory.get_thread_by_id(thread_id) is None:
        memory.create_thread(resource_id, thread_id=thread_id)
    messages = [
        {
            "id": f"{thread_id}-{i}",
            "thread_id": thread_id,
            "resource_id": resource_id,
            "role": roles[(i - first) % len(roles)],
            "content": f"{prefix} {i}",
            "created_at": start + timedelta(seconds=step * (i - first)),
            "metadata": metadata(i) if metadata else {},
        }
        for i in range(first, first + count)
    ]
    return memory.save_messages(messages)


def texts(result):
    return [m.text for m in result.messages]
