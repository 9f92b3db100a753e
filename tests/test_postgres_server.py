"""The PostgreSQL server the tests start: pgvector loads, it runs unprivileged, it cleans up."""

from __future__ import annotations

import os
import pwd

import psycopg
from postgres_server import PostgresServer


def test_the_session_server_has_pgvector(pg_dsn):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]
        distance = conn.execute("SELECT '[1,2,3]'::vector <-> '[1,2,5]'::vector").fetchone()[0]
        major = conn.execute("SHOW server_version_num").fetchone()[0]
    assert tuple(int(p) for p in version.split(".")) >= (0, 8, 0)
    assert distance == 2.0
    assert int(major) >= 180000


def test_each_test_gets_a_schema_name_of_its_own(pg_dsn, pg_schema):
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        taken = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", [pg_schema]).fetchone()[0]
        conn.execute(psycopg.sql.SQL("CREATE SCHEMA {}").format(psycopg.sql.Identifier(pg_schema)))
    assert taken == 0 and pg_schema.startswith("test_")


def test_a_server_runs_unprivileged_and_leaves_nothing_behind():
    server = PostgresServer()
    dsn = server.start()
    root = server.root
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            data = conn.execute("SHOW data_directory").fetchone()[0]
            conn.execute("CREATE TABLE t (x int)")
            conn.execute("INSERT INTO t VALUES (1), (2)")
            assert conn.execute("SELECT sum(x) FROM t").fetchone()[0] == 3
        owner = pwd.getpwuid(os.stat(data).st_uid).pw_name
        assert owner == ("nobody" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name)
    finally:
        server.stop()
    assert not root.exists()
    try:
        psycopg.connect(dsn, connect_timeout=2).close()
    except psycopg.OperationalError:
        pass
    else:
        raise AssertionError("the server still accepts connections after stop()")
