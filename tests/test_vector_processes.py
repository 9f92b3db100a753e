"""Several processes on one PostgreSQL: what one saves, semantic recall in another finds on its
next call, with either vector store (the HNSW index of each process a cache of the rows in the
database, or PgVector searching them there)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from threadrecall import Memory
from threadrecall.embedders import HashEmbedder
from threadrecall.storage import PostgresStorage
from threadrecall.vector import HnswVectorStore, PgVector

TRIES = 1_000
OPTIONS = {"last_messages": 0,
           "semantic_recall": {"top_k": 1, "message_range": 0, "scope": "resource"}}

WRITER = textwrap.dedent("""
    import sys
    from threadrecall import Memory
    from threadrecall.embedders import HashEmbedder
    from threadrecall.storage import PostgresStorage
    from threadrecall.vector import HnswVectorStore, PgVector

    dsn, schema, kind = sys.argv[1], sys.argv[2], sys.argv[3]
    storage = PostgresStorage(dsn, schema=schema)
    vector = HnswVectorStore(storage) if kind == "hnsw" else PgVector(storage)
    memory = Memory(storage=storage, vector=vector, embedder=HashEmbedder(dim=64),
                    options={"semantic_recall": {"scope": "resource"}})
    print("ready", flush=True)
    for line in sys.stdin:
        i = int(line)
        memory.save_messages([{"id": f"m{i}", "thread_id": f"t{i % 7}", "resource_id": "r1",
                               "role": "user", "content": f"note {i} about kw{i}x and kw{i * 7}y"}])
        print(i, flush=True)
    memory.close()
""")


@pytest.mark.parametrize("kind", ["hnsw", "hnsw-cache", "pgvector"])
def test_a_message_saved_in_one_process_is_found_by_the_next_recall_in_another(pg_dsn, pg_schema, kind,
                                                                               tmp_path):
    def reader() -> tuple[Memory, PostgresStorage]:
        storage = PostgresStorage(pg_dsn, schema=pg_schema)
        if kind == "pgvector":
            vector = PgVector(storage)
        else:
            vector = HnswVectorStore(storage, cache_dir=tmp_path if kind == "hnsw-cache" else None)
        return Memory(storage=storage, vector=vector, embedder=HashEmbedder(dim=64), options=OPTIONS), storage

    memory, storage = reader()
    memory.create_thread("r1", thread_id="t0")
    memory.save_messages([{"id": "seed", "thread_id": "t0", "role": "user", "content": "hello"}])
    assert [m.id for m in memory.recall("t0", resource_id="r1", vector_search_string="hello").messages] == ["seed"]
    writer = subprocess.Popen([sys.executable, "-c", WRITER, pg_dsn, pg_schema, kind.removesuffix("-cache")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready"
        misses = []
        for i in range(TRIES):
            if kind == "hnsw-cache" and i == TRIES // 2:  # restarted: its saved set loaded and caught up
                memory.close()
                storage.close()
                memory, storage = reader()
            writer.stdin.write(f"{i}\n")
            writer.stdin.flush()
            assert int(writer.stdout.readline()) == i  # committed in the other process
            hits = memory.recall("t0", resource_id="r1",
                                 vector_search_string=f"note {i} about kw{i}x and kw{i * 7}y").messages
            if [m.id for m in hits] != [f"m{i}"]:
                misses.append(i)
        assert misses == []
    finally:
        writer.stdin.close()
        assert writer.wait(timeout=30) == 0
    if kind == "hnsw-cache":
        assert len(list(tmp_path.glob("*.hnsw"))) == 1  # the restart took the set the first left
    memory.close()
    storage.close()


@pytest.mark.parametrize("deleted_elsewhere", [False, True])
def test_deletes_and_a_recreated_index_in_another_process_reach_the_cache(pg_dsn, pg_schema, deleted_elsewhere):
    here = HnswVectorStore(PostgresStorage(pg_dsn, schema=pg_schema))
    here.create_index("docs", 2)
    here.upsert("docs", [[1, 0], [0, 1]], ids=["a", "b"])
    assert [r.id for r in here.query("docs", [1, 0], top_k=2)] == ["a", "b"]
    script = textwrap.dedent(f"""
        import sys
        from threadrecall.storage import PostgresStorage
        from threadrecall.vector import HnswVectorStore
        store = HnswVectorStore(PostgresStorage(sys.argv[1], schema=sys.argv[2]))
        if {deleted_elsewhere}:
            store.delete_index("docs")
            store.create_index("docs", 2)
            store.upsert("docs", [[1, 1]], ids=["c"])
        else:
            store.delete_vectors("docs", ids=["a"])
            store.upsert("docs", [[0.9, 0.1]], ids=["b"], metadata=[{{"moved": True}}])
    """)
    subprocess.run([sys.executable, "-c", script, pg_dsn, pg_schema], check=True)
    got = [(r.id, r.metadata) for r in here.query("docs", [1, 0], top_k=2)]
    assert got == ([("c", {})] if deleted_elsewhere else [("b", {"moved": True})])
    here.close()


def test_a_cache_lagging_past_the_pruned_changes_rebuilds_instead_of_missing_them(pg_dsn, pg_schema,
                                                                                  monkeypatch):
    """Two stores on two storages (two processes, as far as the database can tell). While one
    sits still, the other deletes, moves and adds vectors over many transactions, and the
    changes it made first are pruned: the first store's next search must still reflect all
    of them (a replay of only the changes left would keep ``gone`` and the old ``moved``)."""
    import numpy as np
    import psycopg

    from threadrecall.vector import rows_postgres

    monkeypatch.setattr(rows_postgres, "PRUNE_EVERY", 4)
    monkeypatch.setattr(rows_postgres, "PRUNE_KEEP", 6)
    lagging = HnswVectorStore(PostgresStorage(pg_dsn, schema=pg_schema))
    lagging.create_index("docs", 2)
    lagging.upsert("docs", [[1, 0], [0.9, 0.1], [0, 1]], ids=["gone", "moved", "kept"])
    assert [r.id for r in lagging.query("docs", [1, 0], top_k=3)] == ["gone", "moved", "kept"]
    busy = HnswVectorStore(PostgresStorage(pg_dsn, schema=pg_schema))
    busy.delete_vectors("docs", ids=["gone"])
    busy.upsert("docs", [[-1, 0]], ids=["moved"])
    for k in range(20):  # later transactions, each its own generation
        busy.upsert("docs", [[np.cos(k), np.sin(k) - 2]], ids=[f"later{k}"])
    with psycopg.connect(pg_dsn) as conn:
        generation, pruned = conn.execute(
            f'SELECT generation, pruned FROM "{pg_schema}".hnsw_indexes').fetchone()
        oldest = conn.execute(f'SELECT min(generation) FROM "{pg_schema}".hnsw_changes').fetchone()[0]
    assert generation == 23 and pruned == 14 and oldest == 15  # the first 14 generations' changes are gone
    got = {r.id: r.score for r in lagging.query("docs", [1, 0], top_k=30)}
    assert "gone" not in got and len(got) == 22
    assert got["moved"] == pytest.approx(-1.0) and got["kept"] == pytest.approx(0.0, abs=1e-6)
    assert {r.id: r.score for r in busy.query("docs", [1, 0], top_k=30)} == got
    lagging.close()
    busy.close()
