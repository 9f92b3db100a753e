"""Semantic recall through Memory.recall: hits, neighbours, scope, filters, threshold, writes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from threadrecall import Memory
from threadrecall.embedders import HashEmbedder
from threadrecall.errors import (
    ConfigurationError,
    DimensionMismatchError,
    ResourceMismatchError,
    ThreadNotFoundError,
)
from threadrecall.semantic import chunk_text, index_name_for

from conftest import T0, texts

WEATHER = [
    ("user", "What is the weather like in Paris today?"),
    ("assistant", "Paris weather today is sunny and warm with a light breeze."),
    ("user", "Can you recommend a good pasta recipe?"),
    ("assistant", "Try spaghetti carbonara with eggs, pecorino and guanciale."),
    ("user", "How do I change a flat bicycle tyre?"),
    ("assistant", "Remove the wheel, lever the tyre off and patch the inner tube."),
    ("user", "Which museums should I visit in Rome?"),
]


@pytest.fixture
def semantic(recall_memory):
    """A Memory with semantic recall (``options`` its settings) on each of the three stores."""
    def make(**options):
        config = {"last_messages": 0, "semantic_recall": {"top_k": 1, "message_range": 1, **options}}
        return recall_memory(embedder=HashEmbedder(dim=64), options=config)
    return make


def save(memory, thread_id, rows, *, resource_id="r1", start=T0, prefix=None):
    if memory.get_thread_by_id(thread_id) is None:
        memory.create_thread(resource_id, thread_id=thread_id)
    return memory.save_messages([
        {"id": f"{prefix or thread_id}-{i}", "thread_id": thread_id, "role": role, "content": text,
         "created_at": start + timedelta(minutes=i)}
        for i, (role, text) in enumerate(rows)
    ])


@pytest.mark.parametrize("message_range, expected", [
    (1, [0, 1, 2]),
    ({"before": 0, "after": 1}, [1, 2]),
    ({"before": 1, "after": 0}, [0, 1]),
    (0, [1]),
])
def test_top_hit_with_its_neighbours(semantic, message_range, expected):
    memory = semantic(message_range=message_range, scope="thread")
    save(memory, "t1", WEATHER)
    result = memory.recall("t1", vector_search_string="Paris weather today sunny warm breeze")
    assert texts(result) == [WEATHER[i][1] for i in expected]


def test_three_consecutive_messages_around_the_best_hit(semantic):
    memory = semantic(scope="thread")
    save(memory, "t1", WEATHER)
    result = memory.recall("t1", vector_search_string="spaghetti carbonara eggs pecorino guanciale")
    assert texts(result) == [WEATHER[i][1] for i in (2, 3, 4)]


def test_long_message_is_chunked_and_recalled_once(semantic):
    memory = semantic(scope="thread", message_range=0)
    long_text = "\n".join(f"line {i} of a very long note about gardening tomatoes" for i in range(1000))
    assert len(chunk_text(long_text)) > 1
    save(memory, "t1", [("user", long_text), ("user", "short unrelated remark about trains")])
    result = memory.recall("t1", vector_search_string=long_text)
    assert len(result.messages) == 1 and result.messages[0].id == "t1-0"


def test_parts_and_strings_are_both_embedded(semantic):
    memory = semantic(scope="thread", message_range=0, top_k=2)
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([
        {"id": "s", "thread_id": "t1", "role": "user", "content": "orange cats sleep all day"},
        {"id": "p", "thread_id": "t1", "role": "assistant",
         "content": {"parts": [{"type": "text", "text": "orange cats"}, {"type": "text", "text": "sleep all day"}]}},
        {"id": "x", "thread_id": "t1", "role": "user", "content": "quantum computing qubits"},
    ])
    result = memory.recall("t1", vector_search_string="orange cats sleep all day")
    assert {m.id for m in result.messages} == {"s", "p"}


def test_thread_scope_stays_in_the_thread(semantic):
    memory = semantic(scope="thread", top_k=5, message_range=0)
    save(memory, "t1", WEATHER[:2])
    save(memory, "t2", WEATHER[:2], prefix="u")
    result = memory.recall("t1", resource_id="r1", vector_search_string="Paris weather")
    assert {m.thread_id for m in result.messages} == {"t1"} and len(result.messages) == 2


@pytest.mark.parametrize("options", [{"scope": "resource"}, {}])
def test_resource_scope_spans_threads_chronologically(semantic, options):
    memory = semantic(top_k=5, message_range=2, **options)
    save(memory, "t1", WEATHER[:2])
    save(memory, "t2", WEATHER[:2], prefix="u", start=T0 + timedelta(days=1))
    save(memory, "t3", WEATHER[:2], resource_id="r2", prefix="v")
    result = memory.recall("t1", resource_id="r1", vector_search_string="Paris weather")
    assert len(result.messages) == 4
    assert [m.created_at for m in result.messages] == sorted(m.created_at for m in result.messages)
    assert {m.resource_id for m in result.messages} == {"r1"}


@pytest.mark.parametrize("scope", ["thread", "resource"])
def test_a_search_checks_the_threads_owner(semantic, scope):
    memory = semantic(scope=scope, top_k=3, message_range=1)
    save(memory, "t1", WEATHER[:4])
    save(memory, "t3", WEATHER[:4], resource_id="r2", prefix="v")
    assert len(memory.recall("t1", resource_id="r1", vector_search_string="Paris weather").messages) == 4
    with pytest.raises(ResourceMismatchError,
                       match="Thread with id t1 is for resource with id r1 but resource r2 was queried"):
        memory.recall("t1", resource_id="r2", vector_search_string="Paris weather")
    with pytest.raises(ResourceMismatchError, match="Thread with id t3 is for resource with id r2"):
        memory.recall("t3", resource_id="r1", vector_search_string="a query matching nothing at all")


def test_a_search_of_a_missing_thread(semantic):
    memory = semantic(scope="thread")
    save(memory, "t1", WEATHER[:2])
    with pytest.raises(ThreadNotFoundError, match="No thread found with id nope"):
        memory.recall("nope", resource_id="r1", vector_search_string="Paris weather")
    resource_wide = memory.recall("nope", resource_id="r1", vector_search_string="Paris weather",
                                  thread_config={"semantic_recall": {"scope": "resource"}})
    assert [m.thread_id for m in resource_wide.messages] == ["t1", "t1"]


def test_resource_scope_needs_a_resource_id(semantic):
    memory = semantic()
    with pytest.raises(ConfigurationError, match="Resource-scoped semantic recall is enabled but no resourceId"):
        memory.recall("t1", vector_search_string="anything")


@pytest.fixture
def projects(semantic):
    def make(flt):
        memory = semantic(top_k=10, message_range=0, filter=flt)
        for project, category in (("project-a", "work"), ("project-b", "work"), ("project-c", "home")):
            memory.create_thread("r1", thread_id=project, metadata={"projectId": project, "category": category})
            save(memory, project, [("user", f"status update for the launch plan of {project}")])
        return memory
    return make


@pytest.mark.parametrize("flt, expected", [
    ({"projectId": {"$eq": "project-a"}}, {"project-a"}),
    ({"$and": [{"projectId": {"$ne": "project-a"}}, {"category": "work"}]}, {"project-b"}),
    ({"projectId": {"$in": ["project-a", "project-c"]}}, {"project-a", "project-c"}),
])
def test_semantic_filter_on_thread_metadata(projects, flt, expected):
    memory = projects(flt)
    result = memory.recall("project-a", resource_id="r1", vector_search_string="launch plan status update")
    assert {m.thread_id for m in result.messages} == expected


def found(memory, query="launch plan status update", mode="vector"):
    config = {"semantic_recall": {"mode": mode}} if mode != "vector" else None
    result = memory.recall("project-a", resource_id="r1", vector_search_string=query, thread_config=config)
    return {m.id for m in result.messages}


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_semantic_filter_on_message_metadata(semantic, mode):
    memory = semantic(top_k=10, message_range=0, filter={"$and": [{"priority": "high"}, {"category": "work"}]})
    for project, category in (("project-a", "work"), ("project-b", "home")):
        memory.create_thread("r1", thread_id=project, metadata={"category": category})
        memory.save_messages([
            {"id": f"{project}-{p}", "thread_id": project, "role": "user", "metadata": {"priority": p},
             "content": f"status update for the launch plan of {project}"} for p in ("high", "low")])
    assert found(memory, mode=mode) == {"project-a-high"}


def test_a_message_key_takes_precedence_over_its_threads(semantic):
    memory = semantic(top_k=10, message_range=0, filter={"category": "work"})
    memory.create_thread("r1", thread_id="project-a", metadata={"category": "home"})
    memory.save_messages([
        {"id": m, "thread_id": "project-a", "role": "user", "content": "status update for the launch plan",
         **({"metadata": {"category": "work"}} if m == "own" else {})} for m in ("own", "inherited")])
    assert found(memory) == {"own"}


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_thread_and_message_metadata_changes_reach_the_vectors(semantic, mode):
    memory = semantic(top_k=10, message_range=0, filter={"category": "work"})
    memory.create_thread("r1", thread_id="project-a", metadata={"category": "home"})
    save(memory, "project-a", [("user", "status update for the launch plan"), ("user", "launch plan notes")])
    assert found(memory, mode=mode) == set()
    memory.update_thread("project-a", metadata={"category": "work"})
    assert found(memory, mode=mode) == {"project-a-0", "project-a-1"}
    memory.update_messages([{"id": "project-a-1", "metadata": {"category": "home"}}])
    assert found(memory, mode=mode) == {"project-a-0"}
    memory.create_thread("r1", thread_id="project-a", metadata={"category": "home"})  # replaced
    assert found(memory, mode=mode) == set()
    memory.update_thread("project-a", metadata={"category": "work"})
    assert found(memory, mode=mode) == {"project-a-0"}
    with pytest.raises(RuntimeError):  # a rolled-back change leaves the vectors as they were
        with memory.transaction():
            memory.update_thread("project-a", metadata={"category": "home"})
            raise RuntimeError("boom")
    assert found(memory, mode=mode) == {"project-a-0"}


def test_threshold_keeps_equal_scores_and_drops_lower(semantic, recall_memory):
    memory = semantic(scope="thread", message_range=0, top_k=7)
    save(memory, "t1", WEATHER)
    query = WEATHER[1][1]
    scores = [r.score for r in memory.vector.query(memory.index.name, memory.index.embed_query(query)[0],
                                                   top_k=7, filter={"thread_id": "t1"})]
    cut = scores[2]
    strict = recall_memory(embedder=memory.embedder, options={
        "last_messages": 0, "semantic_recall": {"scope": "thread", "message_range": 0, "top_k": 7,
                                                "threshold": cut}})
    result = strict.recall("t1", vector_search_string=query)
    assert len(result.messages) == sum(s >= cut for s in scores) >= 3


def test_includes_bypass_filters_and_history_page(recall_memory):
    memory = recall_memory(embedder=HashEmbedder(dim=64), options={
        "last_messages": 2, "semantic_recall": {"scope": "thread", "top_k": 1, "message_range": 0}})
    save(memory, "t1", WEATHER)
    result = memory.recall("t1", vector_search_string="Paris weather today sunny",
                           filter={"date_range": {"start": T0 + timedelta(minutes=5)}})
    assert [m.id for m in result.messages] == ["t1-1", "t1-5", "t1-6"]
    assert result.total == 2


def test_per_page_zero_returns_only_hits(recall_memory):
    memory = recall_memory(embedder=HashEmbedder(dim=64), options={
        "semantic_recall": {"scope": "thread", "top_k": 1, "message_range": 0}})
    save(memory, "t1", WEATHER)
    result = memory.recall("t1", per_page=0, vector_search_string="bicycle tyre flat")
    assert [m.id for m in result.messages] == ["t1-4"] and result.total == 0


def test_caller_includes_default_to_two_neighbours_with_a_search(semantic):
    memory = semantic(scope="thread", message_range=0)
    save(memory, "t1", WEATHER)
    result = memory.recall("t1", vector_search_string="Rome museums", include=[{"id": "t1-3"}])
    assert {"t1-1", "t1-2", "t1-3", "t1-4", "t1-5", "t1-6"} <= {m.id for m in result.messages}


def test_deleted_messages_are_never_recalled(semantic):
    memory = semantic(scope="thread", message_range=0, top_k=3)
    save(memory, "t1", WEATHER)
    memory.delete_messages(["t1-1"])
    assert "t1-1" not in {m.id for m in memory.recall("t1", vector_search_string=WEATHER[1][1]).messages}
    memory.delete_thread("t1")
    assert memory.vector.describe_index(memory.index.name).count == 0


def test_updated_text_is_embedded_again(semantic):
    memory = semantic(scope="thread", message_range=0)
    save(memory, "t1", WEATHER)
    memory.update_messages([{"id": "t1-6", "content": "volcano eruption lava ash cloud"}])
    assert [m.id for m in memory.recall("t1", vector_search_string="volcano lava ash").messages] == ["t1-6"]
    assert memory.vector.describe_index(memory.index.name).count == len(WEATHER)


def test_index_name_carries_the_model(recall_memory):
    memory = recall_memory(embedder=HashEmbedder(dim=64), options={"semantic_recall": True})
    assert memory.index.name == "mastra_memory_hash_v1_64" == index_name_for("hash-v1-64")
    assert index_name_for("text-embedding-3-small") == "mastra_memory_text_embedding_3_small"
    assert index_name_for("org/" + "m" * 80) == "mastra_memory_org_" + "m" * 45
    assert len(index_name_for("x" * 100)) == 63


def test_another_model_of_the_same_dimension_is_never_mixed_in(recall_memory):
    first = recall_memory(embedder=HashEmbedder(dim=32), options={"semantic_recall": True})
    save(first, "t1", WEATHER[:2])
    other = HashEmbedder(dim=32, seed=7)  # another model with the same dimension
    second = recall_memory(embedder=other, options={"semantic_recall": True})
    with pytest.raises(ConfigurationError, match="delete that index") as raised:
        save(second, "t1", WEATHER[2:3])
    assert "mastra_memory_hash_v1_32" in str(raised.value) and other.model_id in str(raised.value)
    assert first.vector.list_indexes() == ["mastra_memory_hash_v1_32"]
    assert first.vector.describe_index("mastra_memory_hash_v1_32").count == 2
    assert len(first.recall("t1", per_page=False).messages) == 2
    kept = recall_memory(embedder=other,
                         options={"semantic_recall": {"index_name": "mastra_memory_hash_v1_32_seed7"}})
    save(kept, "t1", WEATHER[2:3])  # a name of its own: a separate index, by choice


def test_an_index_named_by_dimension_alone_is_not_adopted_silently(recall_memory):
    old = recall_memory(embedder=HashEmbedder(dim=32),
                        options={"semantic_recall": {"index_name": "memory_messages_32"}})
    save(old, "t1", WEATHER[:1])
    new = recall_memory(embedder=HashEmbedder(dim=32), options={"semantic_recall": True})
    with pytest.raises(ConfigurationError, match="index_name.: .memory_messages_32"):
        save(new, "t1", WEATHER[1:2])


def test_another_dimension_on_the_same_index_is_an_error(recall_memory):
    first = recall_memory(embedder=HashEmbedder(dim=64), options={
        "semantic_recall": {"index_name": "shared"}})
    save(first, "t1", WEATHER[:1])
    second = recall_memory(embedder=HashEmbedder(dim=32), options={"semantic_recall": {"index_name": "shared"}})
    with pytest.raises(DimensionMismatchError):
        save(second, "t1", WEATHER[1:2])
    assert len(first.recall("t1", per_page=False).messages) == 1


def test_semantic_recall_needs_an_embedder():
    with pytest.raises(ConfigurationError, match="requires an embedder"):
        Memory(options={"semantic_recall": True})


def test_a_failed_embedding_writes_nothing(recall_memory):
    class Broken(HashEmbedder):
        def embed(self, texts):
            raise RuntimeError("embedding service down")

    memory = recall_memory(embedder=Broken(dim=16), options={"semantic_recall": True})
    memory.create_thread("r1", thread_id="t1")
    with pytest.raises(RuntimeError):
        memory.save_messages([{"thread_id": "t1", "role": "user", "content": "hello"}])
    assert memory.recall("t1").messages == []


def test_switching_embedder_dimension_is_an_error_not_a_second_index(recall_memory):
    first = recall_memory(embedder=HashEmbedder(dim=64), options={"semantic_recall": True})
    save(first, "t1", WEATHER[:1])
    second = recall_memory(embedder=HashEmbedder(dim=32), options={"semantic_recall": True})
    with pytest.raises(DimensionMismatchError, match="embedded with 64 dimensions"):
        save(second, "t1", WEATHER[1:2])
    assert first.vector.list_indexes() == ["mastra_memory_hash_v1_64"]


def greedy_chunks(text: str, limit: int) -> list[str]:
    """The chunking rule spelled out: words (split on any whitespace), long ones cut into
    ``limit``-character pieces, packed greedily with single spaces."""
    pieces = [w[k:k + limit] for w in text.split() for k in range(0, len(w), limit)]
    chunks: list[str] = []
    for piece in pieces:
        if chunks and len(chunks[-1]) + 1 + len(piece) <= limit:
            chunks[-1] += " " + piece
        else:
            chunks.append(piece)
    return chunks


@seed(20261130)
@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab \t\n\u00a0\u3000\u2028\u200b"), max_size=40),
       st.integers(min_value=1, max_value=12))
def test_chunks_follow_the_greedy_rule(text, limit):
    assert chunk_text(text, limit=limit) == greedy_chunks(text, limit)
