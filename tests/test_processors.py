"""SemanticRecall and MessageHistory processors over real storage, vector store and embedder.

``Spy`` wraps a real object, records the calls made to it and passes them on; it can also be
told to fail, to check that failures are swallowed where they should be.
"""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from threadrecall import Memory, Message
from threadrecall.embedders import HashEmbedder
from threadrecall.processors import MessageHistory, SemanticRecall, format_other_threads

from conftest import T0


class Spy:
    def __init__(self, inner, fail=()):
        self._inner, self._fail, self.calls = inner, set(fail), []

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            if name in self._fail:
                raise RuntimeError(f"{name} failed")
            return attr(*args, **kwargs)
        return call

    def named(self, name):
        return [c for c in self.calls if c[0] == name]

    def searches(self):
        """The store's searches: ``search_ids``, or ``search_ids_deferred`` on a cache of rows
        shared with other processes (its freshness checked in the read of the hits)."""
        return [c for c in self.calls if c[0] in SEARCHES]


SEARCHES = ("search_ids", "search_ids_deferred")


class CountingEmbedder(HashEmbedder):
    def __init__(self, dim=32, fail=False):
        super().__init__(dim=dim)
        self.seen, self.fail = [], fail

    def embed(self, texts):
        self.seen.append(list(texts))
        if self.fail:
            raise RuntimeError("embedder down")
        return super().embed(texts)


CHAT = [
    ("t1", "user", "I adopted a golden retriever puppy named Biscuit"),
    ("t1", "assistant", "Congratulations on Biscuit! Golden retrievers love to fetch."),
    ("t1", "user", "What should I cook for dinner tonight?"),
    ("t2", "user", "Biscuit the golden retriever puppy chewed my shoes"),
    ("t2", "assistant", "Puppies chew when teething; give Biscuit a chew toy."),
]


@pytest.fixture
def world(recall_store):
    """Two threads of a conversation saved with semantic recall, on each of the three stores."""
    storage = recall_store.storage
    embedder = CountingEmbedder()
    vector = Spy(recall_store.vector)
    memory = Memory(storage=storage, vector=vector, embedder=embedder, options={"semantic_recall": True})
    memory.create_thread("r1", thread_id="t1")
    memory.create_thread("r1", thread_id="t2")
    memory.save_messages([
        {"id": f"m{i}", "thread_id": t, "role": role, "content": text, "created_at": T0 + timedelta(hours=i)}
        for i, (t, role, text) in enumerate(CHAT)
    ])
    vector.calls.clear()
    return storage, vector, embedder


def user(text, mid="new"):
    return {"id": mid, "role": "user", "content": text}


def processor(world, **options):
    storage, vector, embedder = world
    return SemanticRecall(storage, vector, embedder, **options)


def test_thread_scope_prepends_same_thread_hits(world):
    out = processor(world, scope="thread", top_k=1, message_range=1).process_input(
        [user("golden retriever puppy Biscuit")], thread_id="t1", resource_id="r1")
    assert [m.id for m in out] == ["m0", "m1", "new"]
    assert all(m.metadata["source"] == "memory" for m in out[:2])


def test_query_uses_the_last_user_text_top_k_and_scope_filter(world):
    _, vector, embedder = world
    p = processor(world, top_k=3)
    p.process_input([user("first question", "a"), {"id": "b", "role": "assistant", "content": "answer"},
                     user("Biscuit puppy", "c")], thread_id="t1", resource_id="r1")
    (_, args, kwargs), = vector.searches()
    assert kwargs["top_k"] == 3 and kwargs["filter"] == {"resource_id": "r1"}
    assert embedder.seen[-1] == ["Biscuit puppy"]


def test_thread_scope_filter_and_fallback_without_resource(world):
    _, vector, _ = world
    processor(world, scope="thread").process_input([user("Biscuit")], thread_id="t1", resource_id="r1")
    processor(world, scope="resource").process_input([user("Biscuit")], thread_id="t1")
    assert [c[2]["filter"] for c in vector.searches()] == [{"thread_id": "t1"}, {"thread_id": "t1"}]


def test_threshold_drops_weaker_hits(world):
    p = processor(world, scope="thread", top_k=3, message_range=0, threshold=0.999)
    out = p.process_input([user(CHAT[0][2])], thread_id="t1", resource_id="r1")
    assert [m.id for m in out] == ["m0", "new"]


def test_no_hits_leave_the_input_unchanged(world):
    p = processor(world, scope="thread", threshold=1.01)
    given = [user("Biscuit")]
    assert [m.id for m in p.process_input(given, thread_id="t1")] == ["new"]


def test_a_vector_store_failure_is_swallowed(world, caplog):
    storage, vector, embedder = world
    broken = SemanticRecall(storage, Spy(vector._inner, fail=set(SEARCHES)), embedder)
    with caplog.at_level(logging.ERROR):
        out = broken.process_input([user("Biscuit")], thread_id="t1", resource_id="r1")
    assert [m.id for m in out] == ["new"] and "semantic recall failed" in caplog.text


def test_no_user_message_or_no_thread_means_no_work(world):
    _, vector, embedder = world
    before = len(embedder.seen)
    p = processor(world)
    assert [m.id for m in p.process_input([{"id": "a", "role": "assistant", "content": "hi"}],
                                          thread_id="t1")] == ["a"]
    assert p.process_input([user("Biscuit")], thread_id=None) == [user("Biscuit")]
    assert len(embedder.seen) == before and vector.searches() == []


def test_multi_part_user_message_is_joined_with_spaces(world):
    _, _, embedder = world
    processor(world).process_input([{"id": "x", "role": "user", "content": {"parts": [
        {"type": "text", "text": "Part 1"}, {"type": "text", "text": "Part 2"}]}}], thread_id="t1", resource_id="r1")
    assert embedder.seen[-1] == ["Part 1 Part 2"]


def test_recalled_messages_already_in_the_input_are_not_repeated(world):
    stored = world[0].get_message("m0")
    out = processor(world, scope="thread", top_k=1, message_range=1).process_input(
        [stored, user("golden retriever puppy Biscuit")], thread_id="t1", resource_id="r1")
    assert [m.id for m in out] == ["m1", "m0", "new"]


def test_custom_message_range(world):
    out = processor(world, scope="thread", top_k=1, message_range={"before": 0, "after": 5}).process_input(
        [user("golden retriever puppy Biscuit")], thread_id="t1", resource_id="r1")
    assert [m.id for m in out] == ["m0", "m1", "m2", "new"]


def test_default_and_custom_index_names(world):
    storage, vector, embedder = world
    assert processor(world).index.name == "mastra_memory_hash_v1_32"
    custom = processor(world, index_name="my_index")
    custom.process_output_result([user("hello there", "z")], thread_id="t1", resource_id="r1")
    custom.process_input([user("hello there")], thread_id="t1", resource_id="r1")
    assert {c[1][0] for c in vector.calls if c[0] in ("create_index", "upsert", *SEARCHES)} == {"my_index"}
    assert vector.describe_index("my_index").dimension == 32


def test_other_threads_become_one_dated_system_message(world):
    out = processor(world, top_k=4, message_range=0).process_input(
        [user("golden retriever puppy Biscuit")], thread_id="t1", resource_id="r1")
    assert out[0].role == "system" and out[-1].id == "new"
    text = out[0].text
    assert "<remembered_from_other_conversation>" in text
    assert "User: Biscuit the golden retriever puppy chewed my shoes" in text
    assert "Assistant: Puppies chew" in text
    assert {m.thread_id for m in out[1:-1]} == {"t1"}


def test_thread_scope_never_adds_a_system_message(world):
    out = processor(world, scope="thread", top_k=4).process_input([user("Biscuit puppy")], thread_id="t1")
    assert all(m.role != "system" for m in out)


def test_cross_thread_format_one_message_per_line():
    def msg(mid, thread, role, text, hour, day=1):
        return Message.from_dict({"id": mid, "thread_id": thread, "resource_id": "r", "role": role,
                                  "content": text, "created_at": T0.replace(day=day, hour=hour, minute=5)})
    text = format_other_threads([msg("b", "t2", "assistant", "Hi Ann", 0), msg("a", "t2", "user", "Hello", 0),
                                 msg("c", "t3", "user", "Later", 13, day=2)], "t1")
    assert text.splitlines() == [
        "The following messages were remembered from a different conversation:",
        "<remembered_from_other_conversation>",
        "the following messages are from 2024, May, 1",
        "Message from previous conversation at 12:05 AM: User: Hello",
        "Message from previous conversation at 12:05 AM: Assistant: Hi Ann",
        "the following messages are from 2024, May, 2",
        "Message from previous conversation at 1:05 PM: User: Later",
        "<end_remembered_from_other_conversation>",
    ]


def test_output_embeds_each_new_message_in_one_upsert(world):
    _, vector, embedder = world
    given = [user("a new question about kites", "n1"), {"id": "n2", "role": "assistant", "content": "kites fly"},
             {"id": "n3", "role": "system", "content": "be nice"}, {"id": "n4", "role": "user", "content": "  "}]
    out = processor(world).process_output_result(given, thread_id="t1", resource_id="r1")
    assert [m.id for m in out] == ["n1", "n2", "n3", "n4"]
    (_, args, kwargs), = vector.named("upsert")
    assert kwargs["ids"] == ["n1#0", "n2#0"]
    assert [m["role"] for m in kwargs["metadata"]] == ["user", "assistant"]
    assert kwargs["metadata"][0]["thread_id"] == "t1" and kwargs["metadata"][0]["resource_id"] == "r1"
    assert embedder.seen[-1] == ["a new question about kites", "kites fly"]


def test_output_without_thread_does_nothing(world):
    _, vector, _ = world
    processor(world).process_output_result([user("x")], thread_id=None)
    assert vector.calls == []


@pytest.mark.parametrize("fail", ["embed", "upsert"])
def test_output_failures_are_swallowed(world, fail, caplog):
    storage, vector, _ = world
    embedder = CountingEmbedder(fail=fail == "embed")
    spy = Spy(vector._inner, fail={"upsert"} if fail == "upsert" else set())
    with caplog.at_level(logging.ERROR):
        out = SemanticRecall(storage, spy, embedder).process_output_result([user("kites")], thread_id="t1")
    assert [m.id for m in out] == ["new"] and "indexing new messages failed" in caplog.text
    if fail == "embed":
        assert spy.named("upsert") == []


def test_identical_text_is_embedded_once_across_calls(world):
    storage, vector, embedder = world
    p, q = processor(world), processor(world)
    p.process_input([user("unique query about violins")], thread_id="t1", resource_id="r1")
    q.process_input([user("unique query about violins")], thread_id="t1", resource_id="r1")
    p.process_output_result([user("unique query about violins", "v1")], thread_id="t1")
    assert sum(batch.count("unique query about violins") for batch in embedder.seen) == 1


def test_message_history_prepends_and_saves(storage):
    history = MessageHistory(storage, last_messages=2)
    Memory(storage=storage).create_thread("r1", thread_id="t1")
    history.process_output_result([user("one", "1"), {"id": "2", "role": "assistant", "content": "two"},
                                   {"id": "3", "role": "user", "content": "three"}], thread_id="t1")
    out = history.process_input([user("four", "4")], thread_id="t1")
    assert [m.id for m in out] == ["2", "3", "4"]


def test_processors_have_async_twins(world):
    import asyncio

    storage = world[0]
    async def run():
        recalled = await processor(world, scope="thread", top_k=1).aprocess_input(
            [user("golden retriever puppy Biscuit")], thread_id="t1")
        history = await MessageHistory(storage, last_messages=1).aprocess_input([user("x", "x")], thread_id="t1")
        return recalled, history

    recalled, history = asyncio.run(run())
    assert recalled[-1].id == "new" and len(recalled) > 1
    assert [m.id for m in history] == ["m2", "x"]


@pytest.mark.parametrize("mode, embeds", [("vector", True), ("lexical", False), ("hybrid", True)])
def test_each_mode_ranks_its_own_way(world, mode, embeds):
    storage, vector, embedder = world
    out = processor(world, scope="thread", top_k=1, message_range=0, mode=mode).process_input(
        [user("what should I cook for dinner")], thread_id="t1", resource_id="r1")
    assert [m.id for m in out] == ["m2", "new"]
    assert (["what should I cook for dinner"] in embedder.seen) is embeds
    assert storage.replica.has_lexical is (mode != "vector")  # built on first use
