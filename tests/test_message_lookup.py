"""Memory.get_messages, RecallResult.scores, filters on message metadata in semantic search,
and system messages kept on request."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest

from threadrecall import Memory
from threadrecall.embedders import HashEmbedder
from threadrecall.errors import InvalidArgumentError
from threadrecall.types import RecallResult

from conftest import T0, seed


def test_get_messages_keeps_the_order_given_and_skips_unknown_ids(memory):
    seed(memory, "t1", 3)
    seed(memory, "t2", 2)
    got = memory.get_messages(["t2-2", "missing", "t1-1", "t1-3", "t1-1"])
    assert [m.id for m in got] == ["t2-2", "t1-1", "t1-3"]
    assert [m.text for m in got] == ["Message 2", "Message 1", "Message 3"]
    assert memory.get_messages([]) == []


def test_get_messages_skips_messages_of_another_resource(memory):
    seed(memory, "t1", 2, resource_id="alice")
    seed(memory, "t2", 2, resource_id="bob")
    ids = ["t1-1", "t2-1", "t1-2", "t2-2"]
    assert [m.id for m in memory.get_messages(ids, resource_id="alice")] == ["t1-1", "t1-2"]
    assert [m.id for m in memory.get_messages(ids, resource_id="bob")] == ["t2-1", "t2-2"]
    assert memory.get_messages(ids, resource_id="carol") == []


@pytest.mark.parametrize("ids", ["t1-1", None, [""], [3], {"id": "t1-1"}])
def test_get_messages_rejects_bad_ids(memory, ids):
    with pytest.raises(InvalidArgumentError):
        memory.get_messages(ids)


def test_get_messages_async_twin(memory):
    seed(memory, "t1", 2)
    got = asyncio.run(memory.aget_messages(["t1-2", "t1-1"]))
    assert [m.id for m in got] == ["t1-2", "t1-1"]


ROWS = ["the kettle is broken and leaks", "refund for the broken kettle please",
        "my bicycle tyre is flat", "the weather in Paris is sunny"]


def semantic_memory(storage, **semantic):
    return Memory(storage=storage, embedder=HashEmbedder(dim=64), options={
        "last_messages": 0, "semantic_recall": {"top_k": 2, "message_range": 0, **semantic}})


def test_scores_name_the_semantic_hits_with_their_similarity(storage):
    memory = semantic_memory(storage, scope="thread")
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([{"id": f"m{i}", "thread_id": "t1", "role": "user", "content": text,
                           "created_at": T0 + timedelta(minutes=i)} for i, text in enumerate(ROWS)])
    result = memory.recall("t1", vector_search_string="broken kettle refund")
    assert set(result.scores) == {"m0", "m1"}
    assert result.scores["m1"] > result.scores["m0"] > 0
    direct = memory.index.search("broken kettle refund", top_k=4, filter={"thread_id": "t1"})
    assert result.scores == pytest.approx({h.message_id: h.score for h in direct[:2]})
    assert memory.recall("t1", per_page=2).scores == {}


def test_scores_survive_a_dict_round_trip(storage):
    memory = semantic_memory(storage, scope="thread", message_range=1)
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([{"thread_id": "t1", "role": "user", "content": t} for t in ROWS])
    result = memory.recall("t1", vector_search_string="flat tyre")
    assert result.scores and len(result.messages) > len(result.scores)
    assert RecallResult.from_dict(result.to_dict()) == result
    assert RecallResult.from_dict({k: v for k, v in result.to_dict().items() if k != "scores"}).scores == {}


@pytest.mark.parametrize("mode", ["vector", "lexical", "hybrid"])
def test_a_filter_on_message_metadata_selects_inside_the_search(storage, mode):
    # 300 near-identical messages, 6 of them tagged: a search that filtered after fetching the
    # top 2 would almost never see a tagged one.
    memory = semantic_memory(storage, scope="resource", mode=mode, filter={"tag": "keep"})
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([
        {"id": f"m{i}", "thread_id": "t1", "role": "user", "content": f"broken kettle refund {i}",
         "metadata": {"tag": "keep" if i % 50 == 7 else "other", "n": i}} for i in range(300)])
    result = memory.recall("t1", resource_id="r1", vector_search_string="broken kettle refund")
    assert len(result.scores) == 2
    assert all(memory.get_messages([i])[0].metadata["tag"] == "keep" for i in result.scores)
    per_call = memory.recall("t1", resource_id="r1", vector_search_string="broken kettle refund",
                             thread_config={"semantic_recall": {"filter": {"n": {"$gte": 290}}}})
    assert per_call.scores and all(int(i[1:]) >= 290 for i in per_call.scores)


def test_a_metadata_update_moves_the_message_in_and_out_of_filtered_search(storage):
    memory = semantic_memory(storage, scope="thread", filter={"tag": "keep"})
    memory.create_thread("r1", thread_id="t1")
    memory.save_messages([{"id": f"m{i}", "thread_id": "t1", "role": "user", "content": t}
                          for i, t in enumerate(ROWS)])
    assert memory.recall("t1", vector_search_string="kettle").scores == {}
    memory.update_messages([{"id": "m2", "metadata": {"tag": "keep"}}])
    assert list(memory.recall("t1", vector_search_string="kettle").scores) == ["m2"]


def test_system_messages_are_kept_on_request(memory):
    memory.create_thread("r1", thread_id="t1")
    saved = memory.save_messages([{"thread_id": "t1", "role": "system", "content": "be brief"},
                                  {"thread_id": "t1", "role": "user", "content": "hi"}],
                                 keep_system=True)
    assert [m.role for m in saved] == ["system", "user"]
    assert [m.role for m in memory.recall("t1").messages] == ["system", "user"]


def test_a_dropped_system_message_is_logged(memory, caplog):
    memory.create_thread("r1", thread_id="t1")
    with caplog.at_level(logging.WARNING, logger="threadrecall"):
        saved = memory.save_messages([{"id": "s1", "thread_id": "t1", "role": "system", "content": "x"},
                                      {"id": "u1", "thread_id": "t1", "role": "user", "content": "hi"}])
    assert [m.id for m in saved] == ["u1"]
    assert "s1" in caplog.text and "keep_system" in caplog.text
    with caplog.at_level(logging.WARNING, logger="threadrecall"):
        caplog.clear()
        memory.save_messages([{"thread_id": "t1", "role": "user", "content": "again"}])
    assert caplog.text == ""
