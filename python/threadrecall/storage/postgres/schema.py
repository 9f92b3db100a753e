"""The PostgreSQL tables of a memory and their migrations.

Every table lives in one schema, named by the caller (validated, then quoted as an
identifier). ``migrate`` brings the schema forward inside one transaction that first takes an
advisory lock on the schema's name, so processes opening a fresh database at the same moment
apply each step once, one after the other.

Messages keep their content and metadata as the exact JSON text they were saved with (NaN,
key order and large floats survive), plus ``filter``: the JSONB containment form of the
metadata's top-level scalars (see ``containment``). ``created_at`` of a message is in
microseconds since the epoch, as recall's bounds and rows are.

The change feed: each transaction that writes messages appends rows to ``changes`` under its
own transaction id (``position``); writers share no row, so they never wait for each other
there. A reader's position is a watermark, the ``xmin`` of a snapshot it read in: every
transaction below it had ended by then, so a reader that has read every entry committed at or
above its position in each later snapshot misses no commit, whatever order transactions commit
in. ``feed.position`` is the watermark at which this feed began (a position below it comes
from another incarnation of the schema). Old entries are pruned below ``feed_horizon.position``;
a reader whose position lies below it rebuilds from a scan.
"""

from __future__ import annotations

import re

from psycopg import Connection, sql

from ...errors import ConfigurationError

__all__ = ["MIGRATIONS", "migrate", "quoted_schema"]

_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

MIGRATIONS: list[str] = [
    """
    CREATE TABLE {s}.threads (
        id TEXT PRIMARY KEY,
        resource_id TEXT NOT NULL,
        title TEXT NOT NULL DEFAULT '',
        metadata TEXT NOT NULL DEFAULT '{{}}',
        filter JSONB,
        created_at TIMESTAMPTZ NOT NULL,
        updated_at TIMESTAMPTZ NOT NULL
    );
    CREATE INDEX threads_resource ON {s}.threads (resource_id, created_at);
    CREATE SEQUENCE {s}.message_seq;
    CREATE TABLE {s}.messages (
        id TEXT PRIMARY KEY,
        thread_id TEXT NOT NULL,
        resource_id TEXT,
        role TEXT NOT NULL,
        type TEXT NOT NULL DEFAULT 'text',
        content TEXT NOT NULL,
        metadata TEXT NOT NULL DEFAULT '{{}}',
        filter JSONB,
        created_at BIGINT NOT NULL,
        seq BIGINT NOT NULL
    );
    CREATE INDEX messages_line ON {s}.messages (thread_id, created_at, seq);
    CREATE TABLE {s}.resources (
        id TEXT PRIMARY KEY,
        working_memory TEXT,
        metadata TEXT NOT NULL DEFAULT '{{}}',
        created_at TIMESTAMPTZ NOT NULL,
        updated_at TIMESTAMPTZ NOT NULL
    );
    CREATE TABLE {s}.feed (
        one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
        position BIGINT NOT NULL
    );
    INSERT INTO {s}.feed (position) VALUES (0);
    CREATE TABLE {s}.changes (
        position BIGINT NOT NULL,
        n INTEGER NOT NULL,
        kind CHAR(1) NOT NULL,
        ref TEXT NOT NULL
    );
    CREATE INDEX changes_position ON {s}.changes (position);
    """,
    # The feed's horizon: entries at or below it have been pruned (a reader behind it rescans).
    """
    CREATE TABLE {s}.feed_horizon (
        one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
        position BIGINT NOT NULL
    );
    INSERT INTO {s}.feed_horizon (position) VALUES (0);
    """,
    # Feed positions become transaction ids (no counter row locked to the commit): the entries
    # numbered the former way count as older than any transaction, and the feed begins here.
    """
    UPDATE {s}.changes SET position = 0;
    ALTER TABLE {s}.changes DROP COLUMN n;
    UPDATE {s}.feed SET position = pg_snapshot_xmin(pg_current_snapshot())::text::bigint;
    """,
    # A thread's messages share its resource: without this the planner multiplies the two
    # equalities' selectivities, expects one row of a resource-scoped page, and reads and
    # sorts the whole thread instead of walking the thread's index for the first rows.
    """
    CREATE STATISTICS {s}.messages_thread_resource (dependencies) ON thread_id, resource_id
        FROM {s}.messages;
    ANALYZE {s}.messages;
    """,
    # The thread's index carries each message's resource, so a resource-scoped page counts
    # its messages from the index alone instead of visiting every row of the thread.
    """
    CREATE INDEX messages_line_scoped ON {s}.messages (thread_id, created_at, seq) INCLUDE (resource_id);
    DROP INDEX {s}.messages_line;
    ALTER INDEX {s}.messages_line_scoped RENAME TO messages_line;
    """,
    # How many messages each thread holds per resource ('' for none), kept by triggers on
    # every write of the messages table, so an unfiltered page reads its total instead of
    # counting the thread's rows. Inserts and deletes are counted once per statement from what
    # it actually changed (its transition table: an upsert's inserted rows only, whatever the
    # writer's snapshot saw); an update is counted only for a row that changed thread or
    # resource (the trigger's condition, checked without calling the function otherwise); a
    # TRUNCATE empties them.
    # Counts are added under each key's row lock, in key order: exact under concurrent
    # writers. The triggers come first: they lock the table against writers until the counts
    # of the stored messages are filled in.
    """
    CREATE TABLE {s}.thread_counts (
        thread_id TEXT NOT NULL,
        resource_id TEXT NOT NULL,
        n BIGINT NOT NULL,
        PRIMARY KEY (thread_id, resource_id)
    );
    CREATE FUNCTION {s}.count_messages() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO {s}.thread_counts AS c (thread_id, resource_id, n)
            SELECT thread_id, coalesce(resource_id, ''), count(*) FROM new_rows
            GROUP BY 1, 2 ORDER BY 1, 2
            ON CONFLICT (thread_id, resource_id) DO UPDATE SET n = c.n + excluded.n;
        ELSIF TG_OP = 'DELETE' THEN
            INSERT INTO {s}.thread_counts AS c (thread_id, resource_id, n)
            SELECT thread_id, coalesce(resource_id, ''), -count(*) FROM old_rows
            GROUP BY 1, 2 ORDER BY 1, 2
            ON CONFLICT (thread_id, resource_id) DO UPDATE SET n = c.n + excluded.n;
        ELSIF TG_OP = 'TRUNCATE' THEN
            DELETE FROM {s}.thread_counts;
        ELSE
            INSERT INTO {s}.thread_counts AS c (thread_id, resource_id, n)
            VALUES (OLD.thread_id, coalesce(OLD.resource_id, ''), -1),
                   (NEW.thread_id, coalesce(NEW.resource_id, ''), 1)
            ORDER BY 1, 2
            ON CONFLICT (thread_id, resource_id) DO UPDATE SET n = c.n + excluded.n;
        END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER counted_inserts AFTER INSERT ON {s}.messages
        REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.count_messages();
    CREATE TRIGGER counted_moves AFTER UPDATE OF thread_id, resource_id ON {s}.messages FOR EACH ROW
        WHEN (OLD.thread_id IS DISTINCT FROM NEW.thread_id OR OLD.resource_id IS DISTINCT FROM NEW.resource_id)
        EXECUTE FUNCTION {s}.count_messages();
    CREATE TRIGGER counted_deletes AFTER DELETE ON {s}.messages
        REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.count_messages();
    CREATE TRIGGER counted_truncates AFTER TRUNCATE ON {s}.messages
        FOR EACH STATEMENT EXECUTE FUNCTION {s}.count_messages();
    INSERT INTO {s}.thread_counts (thread_id, resource_id, n)
    SELECT thread_id, coalesce(resource_id, ''), count(*) FROM {s}.messages GROUP BY 1, 2;
    """,
    # A key's count is the sum of its rows, one per server process that wrote it (``slot``,
    # its pid) and the folded rest (slot 0). A writer only ever locks its own process's rows,
    # so no two writers wait for each other on a count, whatever order their statements reach
    # the keys in (a statement that moves messages and inserts others counts in two passes,
    # which no single key order can make safe when the rows are shared). ``FOLD_COUNTS``
    # moves the processes' rows into slot 0 now and then, skipping any a writer holds.
    """
    ALTER TABLE {s}.thread_counts ADD COLUMN slot INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE {s}.thread_counts DROP CONSTRAINT thread_counts_pkey;
    ALTER TABLE {s}.thread_counts ADD PRIMARY KEY (thread_id, resource_id, slot);
    CREATE INDEX thread_counts_unfolded ON {s}.thread_counts (slot) WHERE slot <> 0;
    CREATE OR REPLACE FUNCTION {s}.count_messages() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO {s}.thread_counts AS c (thread_id, resource_id, slot, n)
            SELECT thread_id, coalesce(resource_id, ''), pg_backend_pid(), count(*) FROM new_rows
            GROUP BY 1, 2
            ON CONFLICT (thread_id, resource_id, slot) DO UPDATE SET n = c.n + excluded.n;
        ELSIF TG_OP = 'DELETE' THEN
            INSERT INTO {s}.thread_counts AS c (thread_id, resource_id, slot, n)
            SELECT thread_id, coalesce(resource_id, ''), pg_backend_pid(), -count(*) FROM old_rows
            GROUP BY 1, 2
            ON CONFLICT (thread_id, resource_id, slot) DO UPDATE SET n = c.n + excluded.n;
        ELSIF TG_OP = 'TRUNCATE' THEN
            DELETE FROM {s}.thread_counts;
        ELSE
            INSERT INTO {s}.thread_counts AS c (thread_id, resource_id, slot, n)
            VALUES (OLD.thread_id, coalesce(OLD.resource_id, ''), pg_backend_pid(), -1),
                   (NEW.thread_id, coalesce(NEW.resource_id, ''), pg_backend_pid(), 1)
            ON CONFLICT (thread_id, resource_id, slot) DO UPDATE SET n = c.n + excluded.n;
        END IF;
        RETURN NULL;
    END $$;
    """,
]


def quoted_schema(name: str) -> sql.Identifier:
    """The schema name as an SQL identifier, after checking it is a plain name."""
    if not isinstance(name, str) or not _SCHEMA_NAME.match(name):
        raise ConfigurationError(
            f"schema must be a plain identifier (letters, digits, underscores; at most 63), got {name!r}"
        )
    return sql.Identifier(name)


def migrate(conn: Connection, schema: str, component: str = "memory",
            steps: list[str] = MIGRATIONS) -> int:
    """Create ``schema`` if needed and apply the steps of ``component`` not yet applied;
    returns the version reached. Steps are only ever appended, never edited."""
    ident = quoted_schema(schema)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                     [f"threadrecall.migrate:{schema}"])
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
        conn.execute(sql.SQL(
            "CREATE TABLE IF NOT EXISTS {}.schema_version "
            "(component TEXT PRIMARY KEY, version INTEGER NOT NULL)").format(ident))
        row = conn.execute(sql.SQL("SELECT version FROM {}.schema_version WHERE component = %s")
                           .format(ident), [component]).fetchone()
        current = row[0] if row else 0
        for step in steps[current:]:
            conn.execute(sql.SQL(step).format(s=ident))
        if current < len(steps):
            conn.execute(sql.SQL(
                "INSERT INTO {}.schema_version VALUES (%s, %s) ON CONFLICT (component) "
                "DO UPDATE SET version = excluded.version").format(ident), [component, len(steps)])
    return len(steps)
