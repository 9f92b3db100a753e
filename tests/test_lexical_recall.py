"""Lexical (BM25) and hybrid semantic recall through Memory.recall, and the core's BM25 index."""

from __future__ import annotations

import math
import random
import re
from datetime import timedelta

import pytest

from threadrecall import Memory, _core, hybrid
from threadrecall.config import SemanticRecallConfig
from threadrecall.embedders import HashEmbedder
from threadrecall.errors import ConfigurationError, InvalidArgumentError
from threadrecall.storage import DuckDBStorage

from conftest import T0

TRIP = [
    ("user", "We booked a cabin near the lake for the camping weekend."),
    ("assistant", "Lovely. Remember the mosquito spray for the lake."),
    ("user", "My sister adopted a puppy named Biscuit last week."),
    ("assistant", "Biscuit is a great name for a puppy!"),
    ("user", "I started pottery classes on Tuesdays."),
    ("assistant", "Pottery is relaxing; what did you make first?"),
    ("user", "A wobbly bowl, but I love it."),
]


def lexical_memory(storage, mode="lexical", **options):
    config = {"last_messages": 0, "semantic_recall": {"top_k": 1, "message_range": 0, "mode": mode, **options}}
    embedder = HashEmbedder(dim=64) if mode != "lexical" else None
    return Memory(storage=storage, embedder=embedder, options=config)


def save(memory, thread_id, rows, *, resource_id="r1", metadata=None):
    memory.create_thread(resource_id, thread_id=thread_id, metadata=metadata)
    return memory.save_messages([
        {"id": f"{thread_id}-{i}", "thread_id": thread_id, "role": role, "content": text,
         "created_at": T0 + timedelta(minutes=i)}
        for i, (role, text) in enumerate(rows)
    ])


def ids(result):
    return [m.id for m in result.messages]


def test_lexical_mode_needs_no_embedder_and_finds_the_words(storage):
    memory = lexical_memory(storage)
    save(memory, "t1", TRIP)
    result = memory.recall("t1", resource_id="r1", vector_search_string="What is the puppy called?")
    assert len(result.messages) == 1
    assert result.messages[0].id in ("t1-2", "t1-3")
    assert "puppy" in result.messages[0].text.lower()


def test_message_range_brings_neighbours_in_lexical_mode(storage):
    memory = lexical_memory(storage, message_range=1)
    save(memory, "t1", TRIP)
    result = memory.recall("t1", resource_id="r1", vector_search_string="wobbly bowl")
    assert ids(result) == ["t1-5", "t1-6"]


def test_neighbours_of_matches_can_rank_after_them(storage):
    memory = lexical_memory(storage, top_k=3)
    save(memory, "t1", TRIP)
    # only t1-6 holds the words; its neighbour t1-5 is scored from it; nothing else is
    assert ids(memory.recall("t1", resource_id="r1", vector_search_string="wobbly bowl")) == ["t1-5", "t1-6"]
    assert ids(memory.recall("t1", resource_id="r1", vector_search_string="zebra")) == []


def test_resource_and_thread_scope(storage):
    memory = lexical_memory(storage, top_k=5)
    save(memory, "t1", TRIP[:2])
    save(memory, "t2", [("user", "The lake was frozen this morning")])
    save(memory, "other", [("user", "A lake house in another account")], resource_id="r2")
    found = ids(memory.recall("t1", resource_id="r1", vector_search_string="lake"))
    assert sorted(found) == ["t1-0", "t1-1", "t2-0"]
    found = ids(memory.recall("t1", resource_id="r1", vector_search_string="lake",
                              thread_config={"semantic_recall": {"scope": "thread"}}))
    assert sorted(found) == ["t1-0", "t1-1"]


def test_updates_and_deletes_reach_the_lexical_index(storage):
    memory = lexical_memory(storage, top_k=1)
    save(memory, "t1", TRIP)
    save(memory, "t2", [("user", "Biscuit chewed my shoes")])

    def search(text):
        return ids(memory.recall("t1", resource_id="r1", vector_search_string=text))

    assert search("Biscuit puppy name") == ["t1-3"]
    memory.update_messages([{"id": "t1-3", "content": "What a lovely name for a dog"}])
    memory.delete_messages(["t1-2"])
    assert search("Biscuit") == ["t2-0"]
    assert search("lovely dog") == ["t1-3"]
    memory.delete_thread("t2")
    assert search("Biscuit") == []
    memory.save_messages([{"id": "t1-9", "thread_id": "t1", "role": "user", "content": "Biscuit again"}])
    assert search("Biscuit") == ["t1-9"]


def test_lexical_index_is_rebuilt_from_the_database_at_open(tmp_path):
    path = tmp_path / "memory.duckdb"
    first = DuckDBStorage(path)
    memory = lexical_memory(first)
    save(memory, "t1", TRIP)
    assert ids(memory.recall("t1", resource_id="r1", vector_search_string="wobbly")) == ["t1-6"]
    memory.delete_messages(["t1-6"])
    first.close()
    second = DuckDBStorage(path)
    memory = lexical_memory(second)
    assert ids(memory.recall("t1", resource_id="r1", vector_search_string="wobbly")) == []
    # the other messages are indexed again from the database
    assert ids(memory.recall("t1", resource_id="r1", vector_search_string="pottery Tuesdays")) == ["t1-4"]
    second.close()


def test_speaker_metadata_is_searchable(storage):
    memory = lexical_memory(storage, top_k=1)
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([
        {"id": "a", "thread_id": "t1", "role": "user", "content": "I went hiking",
         "metadata": {"speaker": "Caroline"}},
        {"id": "b", "thread_id": "t1", "role": "assistant", "content": "I went hiking",
         "metadata": {"speaker": "Melanie"}},
    ])
    assert memory.get_thread_by_id("t1") is not None
    assert ids(memory.recall("t1", resource_id="r1", vector_search_string="Melanie hiking")) == ["b"]
    assert memory.recall("t1", per_page=False).messages[0].text == "I went hiking"


def test_filter_applies_to_lexical_hits(storage):
    memory = lexical_memory(storage, top_k=5)
    save(memory, "t1", TRIP[:2], metadata={"topic": "travel"})
    save(memory, "t2", [("user", "The lake froze")], metadata={"topic": "weather"})
    found = ids(memory.recall("t1", resource_id="r1", vector_search_string="lake",
                              thread_config={"semantic_recall": {"filter": {"topic": "weather"}}}))
    assert found == ["t2-0"]
    found = ids(memory.recall("t1", resource_id="r1", vector_search_string="lake",
                              thread_config={"semantic_recall": {"filter": {"role": "assistant"}}}))
    assert found == ["t1-1"]


def test_hybrid_returns_top_k_of_both_rankings(storage):
    memory = lexical_memory(storage, mode="hybrid", top_k=2)
    save(memory, "t1", TRIP)
    found = ids(memory.recall("t1", resource_id="r1", vector_search_string="pottery classes"))
    assert len(found) == 2 and "t1-4" in found
    # the threshold drops vector hits only: BM25 still finds the words
    found = ids(memory.recall("t1", resource_id="r1", vector_search_string="pottery classes",
                              thread_config={"semantic_recall": {"threshold": 1.01}}))
    assert "t1-4" in found


def test_lexical_weight_changes_the_hybrid_ranking_and_is_checked(storage):
    memory = lexical_memory(storage, mode="hybrid")
    save(memory, "t1", [("user", f"pottery classes on day {i}") if i % 3 == 0 else
                        ("assistant", f"ceramics workshop number {i}") for i in range(30)])
    query = "pottery ceramics workshop classes"
    rankings = {w: ids(memory.recall("t1", resource_id="r1", per_page=0, vector_search_string=query,
                                     thread_config={"semantic_recall": {"mode": "hybrid", "top_k": 5,
                                                                        "lexical_weight": w}}))
                for w in (0.0, 1.5, 50.0)}
    assert len({frozenset(found) for found in rankings.values()}) > 1
    for bad in (-1, float("inf"), "2", True):
        with pytest.raises(ConfigurationError, match="lexical_weight"):
            SemanticRecallConfig(mode="hybrid", lexical_weight=bad)


def test_unknown_mode_is_a_configuration_error(storage):
    with pytest.raises(ConfigurationError, match="mode"):
        lexical_memory(storage, mode="fuzzy")
    with pytest.raises(ConfigurationError, match="embedder"):
        Memory(storage=storage, options={"semantic_recall": {"mode": "hybrid"}})


def hybrid_by_parts(memory, semantic, query, scope):
    """Hybrid ranking step by step: each ranking smoothed (neighbours admitted when they pass
    the filter), fused by weighted reciprocal rank in Python, smoothed again."""
    storage, flt = memory.storage, dict(semantic.filter) if semantic.filter else None
    depth, resource_id = max(semantic.top_k, hybrid.CANDIDATES), scope.get("resource_id")
    lexical = hybrid.lexical_scores(storage, query, depth, scope, flt)
    vector = hybrid._vector_scores(memory.index, query, depth, scope, flt, semantic.threshold)

    def smooth(scores, weight):
        entrants = None
        if flt:
            near = dict.fromkeys(n for pair in storage.replica.timeline.adjacent(list(scores), resource_id)
                                 for n in pair if n is not None and n not in scores)
            entrants = hybrid._passing(storage, near, flt)
        smoothed = dict(storage.replica.timeline.smooth(list(scores.items()), weight, resource_id, entrants))
        return sorted(smoothed, key=lambda i: -smoothed[i])

    fused = {}
    lexical_weight = hybrid.LEXICAL_WEIGHT if semantic.lexical_weight is None else semantic.lexical_weight
    for side, weight in ((lexical, lexical_weight), (vector, 1.0)):
        for rank, item in enumerate(smooth(side, hybrid.SIDE_NEIGHBOUR_WEIGHT), 1):
            fused[item] = fused.get(item, 0.0) + weight / (hybrid.RRF_K + rank)
    return smooth(fused, hybrid.NEIGHBOUR_WEIGHT)[:semantic.top_k]


@pytest.mark.parametrize("seed,lexical_weight", [(4, None), (5, None), (6, 0.0), (7, 4.0)])
def test_hybrid_fusion_in_the_core_equals_the_steps(storage, seed, lexical_weight):
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(60)]
    memory = lexical_memory(storage, mode="hybrid")
    # r0 holds far more messages than either ranking's candidates, so smoothing brings in
    # neighbours, and neighbours of neighbours; r1 is small.
    for t in range(18):
        rows = [(rng.choice(["user", "assistant"]), " ".join(rng.choices(words, k=rng.randint(1, 3))))
                for _ in range(100)]
        save(memory, f"t{t}", rows, resource_id="r1" if t < 2 else "r0",
             metadata={"topic": rng.choice(["a", "b"])})
    for query in ["w1 w2", "w3", "w10 w20 w30", "w59"]:
        for scope in [{"thread_id": "t1"}, {"resource_id": "r0"}, {"resource_id": "r1"}]:
            for flt in [None, {"topic": "a"}, {"role": "user"}]:
                semantic = SemanticRecallConfig(top_k=500, mode="hybrid", filter=flt,  # the whole ranking
                                                lexical_weight=lexical_weight)
                assert hybrid.ranked_ids(semantic, memory.storage, memory.index, query, scope) == \
                    hybrid_by_parts(memory, semantic, query, scope)


# ---- the core index against a direct BM25 computation ----

def tokens(text, stop=frozenset()):
    return [w for w in re.split(r"[^\w]|_", text.lower()) if w and w not in stop]


def naive_bm25(docs, query, k1, b):
    """``{id: score}`` straight from the BM25 definition, over ``{id: text}``."""
    toks = {i: tokens(t) for i, t in docs.items()}
    n = len(toks)
    avg = sum(map(len, toks.values())) / n
    out = {}
    for i, doc in toks.items():
        score, shared = 0.0, False
        for term in set(tokens(query)):
            tf = doc.count(term)
            if tf:
                shared = True
                df = sum(term in d for d in toks.values())
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(doc) / avg))
        if shared:
            out[i] = score
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_core_bm25_matches_the_definition_after_churn(seed):
    rng = random.Random(seed)
    words = ["lake", "dog", "pottery", "cabin", "run", "blue", "music", "book", "tea", "paris"]
    index = _core.LexicalIndex(k1=0.9, b=0.4, stem=False, stop_words=False, context=0)
    docs = {}
    for step in range(300):
        mid = f"m{rng.randrange(60)}"
        if rng.random() < 0.2:
            index.remove([mid])
            docs.pop(mid, None)
        else:
            text = " ".join(rng.choice(words) for _ in range(rng.randrange(1, 12)))
            index.upsert([mid], ["t"], ["r"], [text])
            docs[mid] = text
    assert len(index) == len(docs)
    for query in ["lake dog", "pottery", "tea paris music", "nothing"]:
        want = naive_bm25(docs, query, 0.9, 0.4)
        got = dict(index.search(query, 100))
        assert got.keys() == want.keys()
        for key in want:
            assert got[key] == pytest.approx(want[key], rel=1e-4)


def test_core_index_rejects_bad_arguments():
    with pytest.raises(InvalidArgumentError):
        _core.LexicalIndex(b=2.0)
    index = _core.LexicalIndex()
    with pytest.raises(InvalidArgumentError):
        index.upsert(["a"], [], [None], ["x"])
    with pytest.raises(InvalidArgumentError):
        index.search("x", 1, thread_id="t", resource_id="r")
    with pytest.raises(InvalidArgumentError):
        index.search("x", -1)
    with pytest.raises(InvalidArgumentError):
        _core.LexicalIndex(context=-1.0)
    with pytest.raises(InvalidArgumentError):
        _core.LexicalIndex(context_turns=-1)
    with pytest.raises(InvalidArgumentError):
        index.upsert(["a"], ["t"], [None], ["x"], orders=[1, 2])
    assert index.tokenize("The puppies were RUNNING") == ["puppy", "run"]


def test_core_index_scores_a_message_with_the_one_before_it():
    index = _core.LexicalIndex()
    # upserted out of order: the orders place "which breed" after the puppy and before the answer
    index.upsert(["c", "a", "b"], ["t"] * 3, ["r"] * 3,
                 ["A beagle, very loud", "We adopted a puppy", "Which breed is the puppy?"],
                 orders=[30, 10, 20])
    assert [i for i, _ in index.search("breed", 5)] == ["b", "c"]
    index.remove(["b"])
    assert [i for i, _ in index.search("puppy", 5)] == ["a", "c"]
    # the context reaches back context_turns messages
    index.upsert(["d"], ["t"], ["r"], ["Walks twice a day"], orders=[40])
    assert [i for i, _ in index.search("puppy", 5)] == ["a", "c", "d"]
    near = _core.LexicalIndex(context_turns=1)
    near.upsert(["a", "c", "d"], ["t"] * 3, ["r"] * 3, ["We adopted a puppy", "A beagle", "Walks"])
    assert [i for i, _ in near.search("puppy", 5)] == ["a", "c"]
    plain = _core.LexicalIndex(context=0)
    plain.upsert(["a", "b"], ["t", "t"], ["r", "r"], ["We adopted a puppy", "A beagle"])
    assert [i for i, _ in plain.search("puppy", 5)] == ["a"]
