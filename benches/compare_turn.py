"""One agent turn, timed call by call: ``save_messages`` of 2 messages and a semantic ``recall``,
on a DuckDB file with semantic recall on (``HashEmbedder``), beside the DuckDB statements the
same work takes when issued raw, and a writer's latency while 8 threads recall in a loop.

Run: ``python benches/compare_turn.py [--messages 100000] [--json out.json]``. Every figure is
a median (p50) or p90 of one run; compare the columns of one run, not runs on different days.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import numpy as np

from threadrecall import Memory
from threadrecall.cli import import_messages
from threadrecall.embedders import HashEmbedder
from threadrecall.storage import DuckDBStorage

from conftest import conversation

DIM = 384
TURNS = 400
READERS = 8


def quantiles(samples: list[float]) -> dict[str, float]:
    """p50 and p90 in milliseconds."""
    ms = sorted(s * 1000 for s in samples)
    return {"p50": round(statistics.median(ms), 3), "p90": round(ms[int(len(ms) * 0.9)], 3),
            "n": len(ms)}


def timed(call, count: int) -> list[float]:
    out = []
    for i in range(count):
        start = time.perf_counter()
        call(i)
        out.append(time.perf_counter() - start)
    return out


def turn(i: int, thread: str = "hot", resource: str = "r0") -> list[dict]:
    return [{"thread_id": thread, "resource_id": resource, "role": "user",
             "content": f"turn {i}: what did we decide about the trip to Lisbon?"},
            {"thread_id": thread, "resource_id": resource, "role": "assistant",
             "content": f"turn {i}: we booked the train for Friday and a hotel near the river"}]


def open_memory(path: Path) -> Memory:
    return Memory(storage=DuckDBStorage(path), embedder=HashEmbedder(dim=DIM), options={
        "last_messages": 10, "semantic_recall": {"top_k": 4, "message_range": 1, "scope": "resource"}})


# ---- raw DuckDB: the statements one save of two messages and their vectors takes ----

RAW_SCHEMA = """
CREATE TABLE threads (id TEXT PRIMARY KEY, resource_id TEXT, title TEXT, metadata JSON,
                      created_at TIMESTAMPTZ, updated_at TIMESTAMPTZ);
CREATE TABLE messages (id TEXT PRIMARY KEY, thread_id TEXT, resource_id TEXT, role TEXT, type TEXT,
                       content JSON, metadata JSON, created_at TIMESTAMPTZ, seq BIGINT);
CREATE INDEX messages_thread ON messages (thread_id);
CREATE TABLE vector_indexes (name TEXT PRIMARY KEY, dimension INTEGER, metric TEXT, generation BIGINT);
CREATE TABLE vector_rows (index_name TEXT, id TEXT, vector BLOB, metadata TEXT, generation BIGINT,
                          position INTEGER, PRIMARY KEY (index_name, id));
INSERT INTO threads VALUES ('hot', 'r0', '', '{}', now(), now());
INSERT INTO vector_indexes VALUES ('v', 384, 'cosine', 0);
"""


def raw_save(con: duckdb.DuckDBPyConnection, i: int, vectors: np.ndarray) -> None:
    """Two messages, the thread touched, two vectors, the generation bumped: one transaction,
    parameters bound as a driver user would."""
    con.execute("BEGIN TRANSACTION")
    for k, m in enumerate(turn(i)):
        con.execute("INSERT INTO messages VALUES (?, ?, ?, ?, 'text', ?, '{}', now(), ?)",
                    [f"raw{i}-{k}", m["thread_id"], m["resource_id"], m["role"],
                     json.dumps({"parts": [{"type": "text", "text": m["content"]}]}), 2 * i + k])
    con.execute("UPDATE threads SET updated_at = now() WHERE id = 'hot'")
    (gen,) = con.execute("UPDATE vector_indexes SET generation = generation + 1 WHERE name = 'v' "
                         "RETURNING generation").fetchone()
    for k in range(2):
        con.execute("INSERT INTO vector_rows VALUES ('v', ?, ?, '{}', ?, ?)",
                    [f"raw{i}-{k}#0", vectors[k].tobytes(), gen, k])
    con.execute("COMMIT")


def raw_one_row(con: duckdb.DuckDBPyConnection, i: int) -> None:
    con.execute("BEGIN TRANSACTION")
    con.execute("INSERT INTO messages VALUES (?, 'hot', 'r0', 'user', 'text', '{}', '{}', now(), ?)",
                [f"one{i}", 10**9 + i])
    con.execute("COMMIT")


RAW_RECALL = """SELECT id, thread_id, resource_id, role, type, content, metadata, created_at FROM messages
                WHERE thread_id = ? ORDER BY created_at DESC, seq DESC LIMIT 10"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000, help="messages in the recall store")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    report: dict[str, object] = {"messages": args.messages, "dim": DIM, "embedder": f"HashEmbedder({DIM})"}
    work = Path(tempfile.mkdtemp(prefix="turn-"))
    embedder = HashEmbedder(dim=DIM)

    # -- save_messages of 2 messages on a small file, against the raw statements --
    memory = open_memory(work / "save.duckdb")
    memory.save_messages(turn(-1))
    memory.recall("hot", resource_id="r0", vector_search_string="warm up")
    con = duckdb.connect(str(work / "raw.duckdb"))
    con.execute(RAW_SCHEMA)
    saves, raws, ones = [], [], []
    for i in range(TURNS):  # interleaved, so both see the same machine
        saves += timed(lambda _: memory.save_messages(turn(i)), 1)
        vectors = embedder.embed([m["content"] for m in turn(i)])
        raws += timed(lambda _: raw_save(con, i, vectors), 1)
        ones += timed(lambda _: raw_one_row(con, i), 1)
    report["save_2_messages"] = quantiles(saves)
    report["raw_duckdb_same_statements"] = quantiles(raws)
    report["raw_duckdb_one_row_commit"] = quantiles(ones)
    memory.close()
    con.close()

    # -- recall with semantic recall at N messages --
    memory = open_memory(work / "recall.duckdb")
    started = time.perf_counter()
    import_messages(memory, conversation(args.messages), total=args.messages, batch=5_000, progress=False)
    memory.vector.link()
    report["import_seconds"] = round(time.perf_counter() - started, 1)
    threads = max(1, args.messages // 100)
    rng = np.random.default_rng(3)
    picks = [int(t) for t in rng.integers(0, threads, 2000)]
    queries = [f"what about billing and item {k}" for k in rng.integers(0, 1000, 2000)]

    def recall(i: int) -> None:
        t = picks[i % len(picks)]
        memory.recall(f"t{t}", resource_id=f"r{t % 100}", vector_search_string=queries[i % len(queries)])

    def history(i: int) -> None:
        t = picks[i % len(picks)]
        memory.recall(f"t{t}", resource_id=f"r{t % 100}")

    cur = memory.storage.db.cursor()

    def raw_history(i: int) -> None:
        cur.execute(RAW_RECALL, [f"t{picks[i % len(picks)]}"]).fetchall()

    timed(recall, 200)  # warm: query embeddings cached on the second pass only
    report["recall_semantic"] = quantiles(timed(recall, 2000))
    report["recall_history_only"] = quantiles(timed(history, 2000))
    report["raw_duckdb_last_10"] = quantiles(timed(raw_history, 2000))

    # -- a writer while 8 threads recall in a loop --
    idle = timed(lambda i: memory.save_messages(turn(i, "t1", "r1")), 200)
    stop = threading.Event()
    done = [0] * READERS

    def reader(k: int) -> None:
        i = k * 1000
        while not stop.is_set():
            recall(i)
            i += 1
            done[k] += 1

    pool = [threading.Thread(target=reader, args=(k,)) for k in range(READERS)]
    for t in pool:
        t.start()
    time.sleep(0.5)
    start = time.perf_counter()
    busy = timed(lambda i: memory.save_messages(turn(10_000 + i, "t1", "r1")), 200)
    elapsed = time.perf_counter() - start
    stop.set()
    for t in pool:
        t.join()
    report["writer_idle"] = quantiles(idle)
    report["writer_with_8_readers"] = quantiles(busy)
    report["writer_ratio_p50"] = round(report["writer_with_8_readers"]["p50"] / report["writer_idle"]["p50"], 2)
    report["reader_recalls"] = {"min": min(done), "max": max(done), "seconds": round(elapsed, 2)}
    memory.close()

    print(json.dumps(report, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
