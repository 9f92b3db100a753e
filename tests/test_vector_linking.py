"""Deferred graph linking: new vectors are searchable at once and join the graph later."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from threadrecall import Memory
from threadrecall._core import VectorIndex
from threadrecall.embedders import HashEmbedder
from threadrecall.errors import InvalidArgumentError
from threadrecall.storage import DuckDBStorage
from threadrecall.vector import HnswVectorStore

DIM = 16
N = 6000  # past the planner's exact-scan limit, so unscoped queries take the graph plan


def unit(seed: int, n: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def exact_ids(data: np.ndarray, q: np.ndarray, k: int) -> list[str]:
    return [f"v{j}" for j in np.argsort(-(data @ q), kind="stable")[:k]]


def fill(store: HnswVectorStore, data: np.ndarray) -> None:
    store.create_index("docs", DIM)
    for start in range(0, len(data), 1000):
        rows = range(start, min(start + 1000, len(data)))
        store.upsert("docs", data[start : start + 1000], ids=[f"v{i}" for i in rows],
                     metadata=[{"thread_id": f"t{i % 3}"} for i in rows])


def answers(store: HnswVectorStore, queries: np.ndarray) -> list:
    return [[(r.id, round(r.score, 5)) for r in store.query("docs", q, top_k=10)] for q in queries]


def test_index_queues_added_vectors_and_searches_them_exactly():
    data = unit(1, N)  # seed 1
    ix = VectorIndex(DIM, m=12, ef_construction=80, seed=2)
    ix.add([f"v{i}" for i in range(N)], data, [{} for _ in range(N)])
    assert ix.pending == N
    for q in unit(2, 10):  # seed 2
        assert [h for h, _ in ix.search(q, 10)] == exact_ids(data, q, 10)
    assert ix.link_pending(64) == 64
    assert ix.pending == N - 64
    assert ix.remove(["v100", "v5999"]) == 2
    assert ix.link_pending() == N - 66
    assert ix.pending == 0 and ix.link_pending() == 0
    ix.add(["w"], data[:1], [{}], link=True)
    assert ix.pending == 0


def test_store_answers_exactly_with_a_backlog_and_links_on_request():
    data = unit(3, N)  # seed 3
    with HnswVectorStore(background_linking=False) as store:
        fill(store, data)
        queries = unit(4, 20)  # seed 4
        for q in queries:
            assert [r.id for r in store.query("docs", q, top_k=10)] == exact_ids(data, q, 10)
        store.link("docs")
        hits = sum(len({r.id for r in store.query("docs", q, top_k=10)} & set(exact_ids(data, q, 10)))
                   for q in queries)
        assert hits >= 0.95 * 200


def test_background_linker_drains_the_backlog_and_stops_on_close(tmp_path):
    data = unit(5, 2000)  # seed 5
    store = HnswVectorStore(tmp_path / "m.duckdb")
    fill(store, data)
    assert store.query("docs", data[1234], top_k=1)[0].id == "v1234"  # searchable right away
    linker = next(t for t in threading.enumerate() if t.name == "threadrecall-linker")
    index = store._load("docs").index
    for _ in range(10_000):  # wait for the daemon, not on the clock
        if index.pending == 0:
            break
        threading.Event().wait(0.01)
    assert index.pending == 0
    store.close()
    assert not linker.is_alive()


def test_close_and_reopen_with_a_backlog_gives_identical_results(tmp_path):
    db = tmp_path / "m.duckdb"
    data = unit(6, N)  # seed 6
    queries = unit(7, 10)  # seed 7
    with HnswVectorStore(db, background_linking=False) as store:
        fill(store, data[:4000])
        store.link("docs")
        store.upsert("docs", data[4000:], ids=[f"v{i}" for i in range(4000, N)],
                     metadata=[{"thread_id": "t9"} for _ in range(4000, N)])
        store.delete_vectors("docs", ids=["v4001", "v10"])
        before = answers(store, queries)
        scoped = [[r.id for r in store.query("docs", q, filter={"thread_id": "t9"})] for q in queries]
        path = store.index_path("docs")
    saved, _, _ = VectorIndex.load(str(path))
    assert saved.pending == N - 4000 - 1  # the queue was saved, minus the deleted one
    with HnswVectorStore(db, background_linking=False) as store:
        assert answers(store, queries) == before
        assert [[r.id for r in store.query("docs", q, filter={"thread_id": "t9"})] for q in queries] == scoped
        assert store.query("docs", data[5000], top_k=1)[0].id == "v5000"


@pytest.mark.parametrize("scope", ["thread", "resource"])
def test_memory_recalls_messages_right_after_saving_them(tmp_path, scope):
    memory = Memory(storage=DuckDBStorage(tmp_path / "m.duckdb"), embedder=HashEmbedder(dim=64),
                    options={"last_messages": 0, "semantic_recall": {"top_k": 1, "message_range": 0}})
    memory.create_thread("r1", thread_id="t1")
    texts = [f"note {i} about topic {i} with detail {i * 7}" for i in range(300)]
    memory.save_messages([{"id": f"m{i}", "thread_id": "t1", "role": "user", "content": t}
                          for i, t in enumerate(texts)])
    result = memory.recall("t1", resource_id="r1", vector_search_string=texts[123],
                           thread_config={"semantic_recall": {"scope": scope}})
    assert [m.id for m in result.messages] == ["m123"]


def test_metadata_as_json_texts_filters_like_dicts():
    data = unit(8, 3)  # seed 8
    rows = [{"thread_id": "t1", "n": 2**70}, {"thread_id": "t2", "n": -1.5}, None]
    by_dict, by_text = VectorIndex(DIM), VectorIndex(DIM)
    by_dict.add(["a", "b", "c"], data, rows)
    by_text.add(["a", "b", "c"], data, metadata_json=[json.dumps(r) for r in rows])
    for f in ({"thread_id": "t1"}, {"n": {"$gt": 0}}, {"n": {"$exists": False}}):
        assert sorted(by_text.ids_where(f)) == sorted(by_dict.ids_where(f))
    with pytest.raises(InvalidArgumentError):
        by_text.add(["d"], data[:1], metadata_json=["{not json"])
    with pytest.raises(InvalidArgumentError):
        by_text.add(["d"], data[:1])
    assert len(by_text) == 3


def test_store_keeps_metadata_only_python_json_reads():
    with HnswVectorStore(background_linking=False) as store:
        store.create_index("docs", DIM)
        store.upsert("docs", unit(9, 2), ids=["a", "b"], metadata=[{"x": float("nan")}, {"y": 1}])  # seed 9
        hits = store.query("docs", unit(9, 1)[0], filter={"x": {"$exists": True}})
        assert [h.id for h in hits] == ["a"]


def test_linking_done_after_the_last_save_is_saved_on_close(tmp_path):
    db = tmp_path / "link.duckdb"
    rng = np.random.default_rng(9)  # seed 9
    with HnswVectorStore(db, background_linking=False) as store:
        store.create_index("docs", 8)
        store.upsert("docs", rng.standard_normal((300, 8)).astype(np.float32), ids=[f"v{i}" for i in range(300)])
        store.flush()
        assert store._loaded["docs"].index.pending == 300  # noqa: SLF001 - saved while waiting
        store.link("docs")
    with HnswVectorStore(db, background_linking=False) as store:
        store.query("docs", np.ones(8, np.float32), top_k=1)
        assert store._loaded["docs"].index.pending == 0  # noqa: SLF001 - the linked graph was saved


def test_writes_during_linking_lose_nothing_and_link_finishes_the_backlog(tmp_path):
    """Linking steps aside for writers; whatever the interleaving, every vector ends linked
    and found."""
    data = unit(21, 3000)  # seed 21
    with HnswVectorStore(tmp_path / "m.duckdb", background_linking=False) as store:
        store.create_index("docs", DIM)
        store.upsert("docs", data[:1000], ids=[f"v{i}" for i in range(1000)])
        index = store._load("docs").index  # noqa: SLF001 - drive linking by hand
        linker = threading.Thread(target=index.link_pending)
        linker.start()
        for start in (1000, 2000):
            store.upsert("docs", data[start:start + 1000], ids=[f"v{i}" for i in range(start, start + 1000)])
        linker.join()
        store.link("docs")
        assert index.pending == 0 and len(index) == 3000
        for i in range(0, 3000, 97):
            assert store.query("docs", data[i], top_k=1)[0].id == f"v{i}"


def wait_for(condition) -> bool:
    for _ in range(3000):  # wait for the daemon, not on the clock
        if condition():
            return True
        threading.Event().wait(0.01)
    return False


def test_linker_saves_a_lagging_index_file_when_idle_and_writers_never_do(tmp_path, monkeypatch):
    monkeypatch.setattr("threadrecall.vector.hnsw.SAVE_AFTER_CHANGES", 1500)
    data = unit(8, 2000)  # seed 8
    store = HnswVectorStore(tmp_path / "m.duckdb")
    store.create_index("docs", DIM)
    loaded = store._load("docs")  # a new index writes its (empty) file at once
    saves = []
    save = store._save

    def recorded_save(name, loaded):
        pending = loaded.index.pending
        save(name, loaded)
        saves.append((threading.current_thread().name, pending))  # once the file is written

    monkeypatch.setattr(store, "_save", recorded_save)
    fill(store, data)
    assert wait_for(lambda: loaded.index.pending == 0 and saves)
    # never the writing thread, and only once the backlog is linked (a write arriving
    # mid-chunk is not idleness)
    assert set(saves) == {("threadrecall-linker", 0)}
    saved, generation, _ = VectorIndex.load(str(store.index_path("docs")))
    assert len(saved) == 2000 and generation == loaded.generation
    store.close()


def test_without_a_linker_the_writer_saves_once_enough_changed(tmp_path, monkeypatch):
    monkeypatch.setattr("threadrecall.vector.hnsw.SAVE_AFTER_CHANGES", 1500)
    with HnswVectorStore(tmp_path / "m.duckdb", background_linking=False) as store:
        fill(store, unit(9, 2000))  # seed 9: two batches of 1,000, so saved after the second
        saved, _, _ = VectorIndex.load(str(store.index_path("docs")))
        assert len(saved) == 2000


class _HeldSave:
    """An index whose ``save`` waits, once started, until the test lets it go on."""

    def __init__(self, index: VectorIndex) -> None:
        self._index = index
        self.started, self.go_on = threading.Event(), threading.Event()

    def save(self, path: str, generation: int, origin: str) -> int:
        self.started.set()
        assert self.go_on.wait(30)
        return self._index.save(path, generation, origin)

    def __getattr__(self, name: str):
        return getattr(self._index, name)

    def __len__(self) -> int:
        return len(self._index)

    def __contains__(self, vector_id: str) -> bool:
        return vector_id in self._index


def test_writes_go_on_while_an_index_file_is_being_written(tmp_path, monkeypatch):
    never, soon = 10**9, 1000
    monkeypatch.setattr("threadrecall.vector.hnsw.SAVE_AFTER_CHANGES", never)
    data = unit(12, 3000)  # seed 12
    store = HnswVectorStore(tmp_path / "m.duckdb", background_linking=False)
    fill(store, data[:2000])
    loaded = store._load("docs")  # noqa: SLF001 - hold the save by hand
    loaded.index = held = _HeldSave(loaded.index)
    monkeypatch.setattr("threadrecall.vector.hnsw.SAVE_AFTER_CHANGES", soon)
    saver = threading.Thread(target=store._save_due)  # noqa: SLF001 - what the idle linker runs
    saver.start()
    assert held.started.wait(30)
    monkeypatch.setattr("threadrecall.vector.hnsw.SAVE_AFTER_CHANGES", never)  # the writer saves nothing
    written = []
    writer = threading.Thread(target=lambda: written.append(store.upsert(
        "docs", data[2000:], ids=[f"v{i}" for i in range(2000, 3000)])))
    writer.start()
    writer.join(30)
    done_during_save = not writer.is_alive()
    held.go_on.set()
    saver.join()
    writer.join()
    assert done_during_save and len(written[0]) == 1000
    path = store.index_path("docs")
    _, generation, _ = VectorIndex.load(str(path))
    assert generation < loaded.generation  # tagged as of the save's start; it may hold more
    early = path.read_bytes()
    store.close()
    path.write_bytes(early)  # reopen from that file: the catch-up replays what it already holds
    with HnswVectorStore(tmp_path / "m.duckdb", background_linking=False) as store:
        assert store.describe_index("docs").count == 3000
        assert [store.query("docs", data[i], top_k=1)[0].id for i in (5, 2500)] == ["v5", "v2500"]
        assert len(store._load("docs").index) == 3000  # noqa: SLF001 - no vector twice


def test_a_save_that_ends_after_its_index_is_deleted_leaves_no_file(tmp_path):
    store = HnswVectorStore(tmp_path / "m.duckdb", background_linking=False)
    fill(store, unit(13, 500))  # seed 13
    loaded = store._load("docs")  # noqa: SLF001
    path = store.index_path("docs")
    store.delete_index("docs")
    store._save("docs", loaded)  # noqa: SLF001 - a save that was under way
    assert not path.exists() and not list(tmp_path.glob("*.part"))
    store.close()


def test_a_failed_save_is_logged_and_linking_goes_on(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr("threadrecall.vector.hnsw.SAVE_AFTER_CHANGES", 500)
    monkeypatch.setattr("threadrecall.vector.linker.LINK_IDLE_WAIT", 0.05)  # retry soon
    data = unit(14, 2000)  # seed 14
    store = HnswVectorStore(tmp_path / "m.duckdb")
    store.create_index("docs", DIM)
    loaded = store._load("docs")  # noqa: SLF001
    save, failures = store._save, []

    def failing_once(name, loaded):
        if not failures:
            failures.append(name)
            raise OSError("No space left on device")
        save(name, loaded)

    monkeypatch.setattr(store, "_save", failing_once)
    with caplog.at_level("WARNING", logger="threadrecall.vector.linker"):
        fill(store, data[:1000])
        assert wait_for(lambda: failures and loaded.index.pending == 0)
        assert len(store.upsert("docs", data[1000:], ids=[f"v{i}" for i in range(1000, 2000)])) == 1000
        # the linker survived: the new vectors are linked, and the retried save lands
        assert wait_for(lambda: loaded.index.pending == 0 and not loaded.stale)
    assert "saving an index file failed: No space left on device" in caplog.text
    saved, _, _ = VectorIndex.load(str(store.index_path("docs")))
    assert len(saved) == 2000
    store.close()
