"""ThreadRecallStore: LangGraph's BaseStore behaviour (modelled on LangGraph's own store tests)
on DuckDB files, with semantic search through the HNSW index."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

pytest.importorskip("langgraph.store.base")

from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp  # noqa: E402

from threadrecall import Memory  # noqa: E402
from threadrecall.embedders import HashEmbedder  # noqa: E402
from threadrecall.errors import InvalidArgumentError  # noqa: E402
from threadrecall.integrations.langgraph import ThreadRecallStore  # noqa: E402
from threadrecall.storage import DuckDBStorage  # noqa: E402

EMBEDDER = HashEmbedder(dim=64)


def embed(texts):
    return EMBEDDER.embed(list(texts)).tolist()


@pytest.fixture
def memory(tmp_path):
    with Memory(storage=DuckDBStorage(tmp_path / "store.duckdb")) as memory:
        yield memory


@pytest.fixture
def store(memory):
    store = ThreadRecallStore(memory, index={"dims": 64, "embed": embed, "fields": ["text"]})
    yield store
    store.close()


def test_put_get_update_delete(memory):
    store = ThreadRecallStore(memory)
    ns = ("users", "u1")
    assert store.get(ns, "prefs") is None
    store.put(ns, "prefs", {"theme": "dark", "nested": {"a": [1, 2]}})
    first = store.get(ns, "prefs")
    assert (first.namespace, first.key, first.value) == (ns, "prefs", {"theme": "dark", "nested": {"a": [1, 2]}})
    store.put(ns, "prefs", {"theme": "light"})
    second = store.get(ns, "prefs")
    assert second.value == {"theme": "light"}
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    assert store.get(("users", "u2"), "prefs") is None  # the key is per namespace
    store.delete(ns, "prefs")
    assert store.get(ns, "prefs") is None
    assert store.list_namespaces() == []


def test_batch_answers_in_order_reads_before_writes_and_commits_once(memory, monkeypatch):
    store = ThreadRecallStore(memory)
    store.put(("a",), "k0", {"n": 0})
    db = memory.storage.db
    outermost = []
    begin = db.transaction

    def counting():
        if db._depth == 0:
            outermost.append(1)
        return begin()

    monkeypatch.setattr(db, "transaction", counting)
    ops = [PutOp(("a",), f"k{i}", {"n": i}) for i in range(1, 51)]
    ops += [GetOp(("a",), "k0"), GetOp(("a",), "k1"), PutOp(("a",), "k0", None),
            SearchOp(("a",), limit=100), ListNamespacesOp(limit=10)]
    results = store.batch(ops)
    assert len(outermost) == 1
    assert results[:50] == [None] * 50
    assert results[50].value == {"n": 0} and results[51] is None  # the state before the batch
    assert results[52] is None and [i.key for i in results[53]] == ["k0"]
    assert results[54] == [("a",)]
    assert store.get(("a",), "k0") is None and store.get(("a",), "k50").value == {"n": 50}
    outermost.clear()
    for i in range(5):
        store.put(("a",), f"x{i}", {"n": i})
    assert len(outermost) == 5


def test_search_by_prefix_filter_limit_and_offset(memory):
    store = ThreadRecallStore(memory)
    for i in range(10):
        store.put(("docs", "team-a" if i % 2 else "team-b"), f"d{i}",
                  {"n": i, "kind": "report" if i < 5 else "memo", "meta": {"lang": "en" if i % 3 else "fr"}})
    store.put(("other",), "x", {"n": 3, "kind": "report"})
    everything = store.search(("docs",), limit=100)
    assert sorted(i.key for i in everything) == [f"d{i}" for i in range(10)]
    assert [i.key for i in store.search(("docs", "team-a"))] == ["d1", "d3", "d5", "d7", "d9"]
    assert sorted(i.key for i in store.search(("docs",), filter={"kind": "report"})) == ["d0", "d1", "d2", "d3", "d4"]
    assert sorted(i.key for i in store.search(("docs",), filter={"n": {"$gte": 7}})) == ["d7", "d8", "d9"]
    assert sorted(i.key for i in store.search(("docs",), filter={"n": {"$gt": 2, "$lte": 4}})) == ["d3", "d4"]
    assert sorted(i.key for i in store.search(("docs",), filter={"kind": {"$ne": "report"}})) == ["d5", "d6", "d7", "d8", "d9"]
    assert sorted(i.key for i in store.search(("docs",), filter={"meta": {"lang": "fr"}})) == ["d0", "d3", "d6", "d9"]
    assert sorted(i.key for i in store.search((), filter={"kind": "report", "n": 3})) == ["d3", "x"]
    page = [i.key for i in store.search(("docs", "team-a"), limit=2, offset=1)]
    assert page == ["d3", "d5"]
    assert all(i.score is None for i in everything)
    with pytest.raises(InvalidArgumentError):
        store.search(("docs",), filter={"n": {"$regex": "x"}})


def test_semantic_search_scores_and_filters_inside_the_index(store):
    texts = {"pets": "my cat sleeps on the warm sofa", "food": "a recipe for spaghetti carbonara",
             "bike": "fixing a flat bicycle tyre", "cats": "cat food and cat toys for the sofa"}
    for key, text in texts.items():
        store.put(("notes", "u1"), key, {"text": text, "topic": key})
    store.put(("notes", "u2"), "pets", {"text": texts["pets"], "topic": "pets"})
    hits = store.search(("notes", "u1"), query="cat on the sofa", limit=2)
    assert [h.key for h in hits] == ["pets", "cats"]
    assert hits[0].score >= hits[1].score
    q, v = np.array(embed(["cat on the sofa"])[0]), np.array(embed([texts["pets"]])[0])
    assert hits[0].score == pytest.approx(float(q @ v / np.linalg.norm(q) / np.linalg.norm(v)), abs=1e-5)
    assert [h.namespace for h in store.search(("notes",), query="cat on the sofa", limit=5)
            if h.key == "pets"] == [("notes", "u1"), ("notes", "u2")]
    filtered = store.search(("notes", "u1"), query="cat on the sofa", filter={"topic": "bike"})
    assert [h.key for h in filtered] == ["bike"] and filtered[0].score is not None
    ranked = [h.key for h in store.search(("notes", "u1"), query="cat sofa", limit=3)]
    assert [h.key for h in store.search(("notes", "u1"), query="cat sofa", limit=1, offset=1)] == ranked[1:2]


def test_a_filter_selects_inside_the_search_among_many_near_misses(store):
    store.batch([PutOp(("n",), f"k{i}", {"text": f"cat on the sofa {i}", "keep": i % 97 == 5})
                 for i in range(400)])
    hits = store.search(("n",), query="cat on the sofa", filter={"keep": True}, limit=3)
    assert len(hits) == 3 and all(store.get(("n",), h.key).value["keep"] for h in hits)
    everything = store.search(("n",), query="cat on the sofa", filter={"keep": True}, limit=10)
    assert sorted(h.key for h in everything) == sorted(f"k{i}" for i in range(400) if i % 97 == 5)


def test_index_fields_and_per_put_overrides(store):
    store.put(("d",), "a", {"text": "spaghetti carbonara recipe", "title": "bicycle"})
    store.put(("d",), "b", {"text": "bicycle repair", "title": "x"}, index=False)
    store.put(("d",), "c", {"text": "nothing", "title": "bicycle tyre repair"}, index=["title"])
    found = store.search(("d",), query="bicycle tyre repair", limit=10)
    assert [h.key for h in found] == ["c", "a"]  # b has no vector, a is found by its text only
    store.put(("d",), "c", {"text": "bicycle tyre repair"})  # re-indexed by the store's fields
    assert [h.key for h in store.search(("d",), query="bicycle tyre repair", limit=1)] == ["c"]
    store.delete(("d",), "c")
    assert [h.key for h in store.search(("d",), query="bicycle tyre repair", limit=10)] == ["a"]


def test_list_namespaces_with_prefix_suffix_wildcards_depth_and_paging(memory):
    store = ThreadRecallStore(memory)
    for ns in [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"),
               ("a", "c", "f"), ("b", "a", "f"), ("users", "123"), ("users", "456", "settings")]:
        store.put(ns, "k", {"v": 1})
    assert store.list_namespaces(prefix=("a", "b")) == [
        ("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")]
    assert store.list_namespaces(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f"), ("b", "a", "f")]
    assert store.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("a",), suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert store.list_namespaces(limit=3, offset=2) == [("a", "b", "d", "i"), ("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("users",), max_depth=2) == [("users", "123"), ("users", "456")]


def test_items_and_vectors_survive_reopening_the_file(tmp_path):
    path = tmp_path / "s.duckdb"
    index = {"dims": 64, "embed": embed, "fields": ["text"]}
    with Memory(storage=DuckDBStorage(path)) as memory:
        store = ThreadRecallStore(memory, index=index)
        store.put(("m",), "one", {"text": "the museum opens at nine"})
        store.put(("m",), "two", {"text": "pasta with tomato sauce"})
        before = [(h.key, h.score) for h in store.search(("m",), query="museum opens", limit=2)]
        store.close()
    assert before[0][0] == "one"
    with Memory(storage=DuckDBStorage(path)) as memory:
        store = ThreadRecallStore(memory, index=index)
        assert store.get(("m",), "one").value == {"text": "the museum opens at nine"}
        after = [(h.key, h.score) for h in store.search(("m",), query="museum opens", limit=2)]
        assert [k for k, _ in after] == [k for k, _ in before]
        assert [s for _, s in after] == pytest.approx([s for _, s in before])
        store.close()


def test_the_memory_embedder_serves_when_no_index_is_given(tmp_path):
    with Memory(storage=DuckDBStorage(tmp_path / "e.duckdb"), embedder=EMBEDDER) as memory:
        store = ThreadRecallStore(memory)
        store.put(("m",), "one", {"text": "the museum opens at nine"})
        store.put(("m",), "two", {"text": "pasta with tomato sauce"})
        hits = store.search(("m",), query="pasta tomato", limit=2)
        assert [h.key for h in hits] == ["two", "one"] and hits[0].score > hits[1].score


def test_async_batch(store):
    async def run():
        await store.aput(("a",), "k", {"text": "cat on the sofa"})
        await store.aput(("a",), "j", {"text": "bicycle tyre"})
        got = await store.aget(("a",), "k")
        hits = await store.asearch(("a",), query="bicycle", limit=1)
        return got.value, [h.key for h in hits], await store.alist_namespaces()

    assert asyncio.run(run()) == ({"text": "cat on the sofa"}, ["j"], [("a",)])
