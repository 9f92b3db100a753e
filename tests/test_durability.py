"""A writer killed with SIGKILL mid-save loses no acknowledged message and leaves no half batch."""

from __future__ import annotations

import textwrap

from conftest import kill_after_acks
from threadrecall import Memory
from threadrecall.embedders import HashEmbedder
from threadrecall.storage import DuckDBStorage

WRITER = textwrap.dedent(
    """
    import sys
    from threadrecall import Memory
    from threadrecall.embedders import HashEmbedder
    from threadrecall.storage import DuckDBStorage

    memory = Memory(storage=DuckDBStorage(sys.argv[1]), embedder=HashEmbedder(dim=16),
                    options={"semantic_recall": {"scope": "thread"}})
    memory.create_thread("r1", thread_id="t1")
    batch = 0
    while True:
        memory.save_messages([{"id": f"b{batch}-{j}", "thread_id": "t1", "role": "user",
                               "content": f"batch {batch} message {j}"} for j in range(25)])
        print(batch, flush=True)
        batch += 1
    """
)


def test_sigkill_mid_save_keeps_every_acknowledged_batch_whole(tmp_path):
    db = tmp_path / "crash.duckdb"
    acked = kill_after_acks(WRITER, db, 30)

    memory = Memory(storage=DuckDBStorage(db), embedder=HashEmbedder(dim=16),
                    options={"semantic_recall": {"scope": "thread", "top_k": 1, "message_range": 0}})
    ids = [m.id for m in memory.recall("t1", per_page=False).messages]
    assert len(ids) % 25 == 0, "a batch landed half-written"
    assert len(ids) >= 25 * (acked + 1)
    assert ids == [f"b{b}-{j}" for b in range(len(ids) // 25) for j in range(25)]
    assert memory.vector.describe_index(memory.index.name).count == len(ids)
    hit = memory.recall("t1", per_page=0, vector_search_string="batch 7 message 3")
    assert [m.id for m in hit.messages] == ["b7-3"]
