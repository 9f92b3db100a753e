"""Asymmetric embedders: recall embeds its query with ``embed_query`` in every mode that uses
vectors, and in the SemanticRecall processor; saved messages go through ``embed``; an embedder
without ``embed_query`` keeps working through ``embed``."""

from __future__ import annotations

from datetime import timedelta

import pytest

from threadrecall import Memory
from threadrecall.embedders import HashEmbedder
from threadrecall.processors import SemanticRecall
from threadrecall.vector import HnswVectorStore

from conftest import T0

CHAT = [
    ("user", "I adopted a golden retriever puppy named Biscuit"),
    ("assistant", "Congratulations! Retrievers love to fetch."),
    ("user", "What should I cook for dinner tonight?"),
    ("assistant", "Try a mushroom risotto with parmesan."),
    ("user", "My laptop battery drains too fast"),
    ("assistant", "Lower the screen brightness and check background apps."),
]


class Asymmetric(HashEmbedder):
    """Embeds a query as the passage it stands for (``meaning``), so a query with no word in
    common with its answer finds it only when ``embed_query`` is used; records every call."""

    meaning = {"my new pet": "golden retriever puppy named Biscuit"}

    def __init__(self) -> None:
        super().__init__(dim=64)
        self.documents: list[str] = []
        self.queries: list[str] = []

    def embed(self, texts):
        self.documents.extend(texts)
        return super().embed(texts)

    def embed_query(self, texts):
        self.queries.extend(texts)
        return super().embed([self.meaning.get(t, t) for t in texts])


@pytest.fixture
def world(storage):
    embedder = Asymmetric()
    vector = HnswVectorStore(storage)
    memory = Memory(storage=storage, vector=vector, embedder=embedder,
                    options={"semantic_recall": {"top_k": 1, "message_range": 0}})
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([
        {"id": f"m{i}", "thread_id": "t1", "role": role, "content": text,
         "created_at": T0 + timedelta(minutes=i)}
        for i, (role, text) in enumerate(CHAT)
    ])
    return memory, vector, embedder


@pytest.mark.parametrize("mode", ["vector", "hybrid"])
def test_recall_embeds_the_query_with_embed_query(world, mode):
    memory, _, embedder = world
    assert len(embedder.documents) == len(CHAT) and embedder.queries == []
    result = memory.recall("t1", resource_id="r1", per_page=0, vector_search_string="my new pet",
                           thread_config={"semantic_recall": {"mode": mode, "top_k": 1,
                                                              "message_range": 0}})
    assert [m.id for m in result.messages] == ["m0"]
    assert embedder.queries == ["my new pet"]
    assert "my new pet" not in embedder.documents


def test_repeated_queries_come_from_the_cache_apart_from_documents(world):
    memory, _, embedder = world
    for _ in range(3):
        memory.recall("t1", resource_id="r1", per_page=0, vector_search_string="my new pet")
    assert embedder.queries == ["my new pet"]
    # a query equal to a saved text is still embedded as a query, not read from the document entry
    memory.recall("t1", resource_id="r1", per_page=0, vector_search_string=CHAT[2][1])
    assert embedder.queries == ["my new pet", CHAT[2][1]]


def test_the_processor_embeds_the_query_with_embed_query(world, storage):
    _, vector, embedder = world
    processor = SemanticRecall(storage, vector, embedder, top_k=1, message_range=0, scope="thread")
    out = processor.process_input([{"id": "new", "role": "user", "content": "my new pet"}],
                                  thread_id="t1", resource_id="r1")
    assert [m.id for m in out] == ["m0", "new"]
    assert embedder.queries == ["my new pet"]
    processor.process_output_result([{"id": "new2", "role": "user", "content": "walks in the park"}],
                                    thread_id="t1", resource_id="r1")
    assert embedder.documents[-1] == "walks in the park"
    assert embedder.queries == ["my new pet"]


class Symmetric(HashEmbedder):
    def __init__(self) -> None:
        super().__init__(dim=64)
        self.calls: list[str] = []

    def embed(self, texts):
        self.calls.extend(texts)
        return super().embed(texts)


def test_an_embedder_without_embed_query_embeds_queries_with_embed(storage):
    embedder = Symmetric()
    memory = Memory(storage=storage, vector=HnswVectorStore(storage), embedder=embedder,
                    options={"semantic_recall": {"top_k": 1, "message_range": 0}})
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([{"thread_id": "t1", "role": r, "content": c} for r, c in CHAT])
    result = memory.recall("t1", resource_id="r1", per_page=0, vector_search_string="golden retriever puppy")
    assert result.messages[0].text == CHAT[0][1]
    assert embedder.calls[-1] == "golden retriever puppy"
    # the query vector of a saved text is the saved one: answered from the cache
    before = len(embedder.calls)
    memory.recall("t1", resource_id="r1", per_page=0, vector_search_string=CHAT[4][1])
    assert len(embedder.calls) == before
