"""The DuckDB schema of threads, messages and resources, and the row shapes written to it."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa

from ...types import Message, Thread, dumps, to_utc
from ..rows import to_micros

__all__ = ["FOLD_TOUCHES", "MESSAGE_VALUES", "MIGRATIONS", "PAYLOAD_SQL", "RECOVER_TOUCHES", "THREAD_VALUES",
           "UPSERT_MESSAGES", "UPSERT_THREADS", "VALUES_ROWS", "message_table", "thread_of", "thread_table"]

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
    # DuckDB alters no table an index depends on: the indexes go and come back around it.
    """
    DROP INDEX messages_thread;
    ALTER TABLE messages ADD COLUMN saved_at TIMESTAMPTZ;
    CREATE INDEX messages_thread ON messages (thread_id);
    DROP INDEX threads_resource;
    ALTER TABLE threads ADD COLUMN folded_seq BIGINT NOT NULL DEFAULT 0;
    CREATE INDEX threads_resource ON threads (resource_id);
    """,
]

# The thread touches that messages recorded and the threads table has not taken yet (left by a
# process that stopped before folding them): the last such message of each thread.
RECOVER_TOUCHES = """
    UPDATE threads SET updated_at = l.at, folded_seq = l.seq
    FROM (SELECT thread_id, max(seq) AS seq, arg_max(saved_at, seq) AS at FROM messages
          WHERE saved_at IS NOT NULL GROUP BY thread_id) l
    WHERE threads.id = l.thread_id AND l.seq > threads.folded_seq
"""
FOLD_TOUCHES = """
    UPDATE threads SET updated_at = p.at, folded_seq = ?
    FROM (SELECT unnest(?::VARCHAR[]) AS id, unnest(?::TIMESTAMPTZ[]) AS at) p WHERE threads.id = p.id
"""

UPSERT_THREADS = """
    INSERT INTO threads SELECT * FROM incoming_threads
    ON CONFLICT (id) DO UPDATE SET resource_id = excluded.resource_id,
        title = excluded.title, metadata = excluded.metadata,
        updated_at = excluded.updated_at, folded_seq = excluded.folded_seq
    RETURNING id, resource_id, title, metadata, created_at, updated_at
"""
THREAD_VALUES = "(?, ?, ?, ?, ?, ?, ?)"

UPSERT_MESSAGES = """
    INSERT INTO messages SELECT * FROM incoming
    ON CONFLICT (id) DO UPDATE SET thread_id = excluded.thread_id,
        resource_id = excluded.resource_id, role = excluded.role,
        type = excluded.type, content = excluded.content,
        metadata = excluded.metadata
"""

# Batches up to this size are inserted with bound values: for a few rows that costs less than
# registering an Arrow table and scanning it.
VALUES_ROWS = 16
MESSAGE_VALUES = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"  # plain values: appended, not inserted (``Database``)

PAYLOAD_SQL = (
    "'{\"role\":' || to_json(role) || ',\"type\":' || to_json(type) || ',\"content\":' || content"
    " || ',\"metadata\":' || metadata || '}'"
)


def message_table(messages: Sequence[Message], seqs: Sequence[int], contents: list[str],
                   metadatas: list[str], saved_at: list[datetime | None]) -> pa.Table:
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
        "saved_at": pa.array(saved_at, pa.timestamp("us", tz="UTC")),
    })


def thread_table(threads: Sequence[Thread], now: datetime, folded_seq: int) -> pa.Table:
    return pa.table({
        "id": [t.id for t in threads],
        "resource_id": [t.resource_id for t in threads],
        "title": [t.title or "" for t in threads],
        "metadata": [dumps(t.metadata or {}) for t in threads],
        "created_at": pa.array([t.created_at or now for t in threads], pa.timestamp("us", tz="UTC")),
        "updated_at": pa.array([t.updated_at or now for t in threads], pa.timestamp("us", tz="UTC")),
        "folded_seq": pa.array([folded_seq] * len(threads), pa.int64()),
    })


def thread_of(row: Sequence[Any]) -> Thread:
    return Thread(
        id=row[0], resource_id=row[1], title=row[2], metadata=json.loads(row[3]),
        created_at=to_utc(row[4]), updated_at=to_utc(row[5]),
    )
