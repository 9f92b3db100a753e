"""ThreadRecallConversationStore: Pydantic AI agent runs with load and save on DuckDB files,
compare-and-set on the revision, forks, branches, scopes and deletion."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("pydantic_ai.conversation_store")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.conversation import Conversation  # noqa: E402
from pydantic_ai.conversation_store import ConversationConflict  # noqa: E402
from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.test import TestModel  # noqa: E402

from threadrecall import Memory  # noqa: E402
from threadrecall.integrations.pydantic_ai import ThreadRecallConversationStore  # noqa: E402
from threadrecall.storage import DuckDBStorage  # noqa: E402


def weather_agent():
    agent = Agent(TestModel(), instructions="Answer briefly.")

    @agent.tool_plain
    def forecast(city: str) -> str:
        return f"sunny in {city}"

    return agent


async def turn(store, agent, conversation_id, prompt, **kw):
    conversation = await store.load(conversation_id, **kw) or Conversation(conversation_id=conversation_id)
    result = await agent.run(prompt, conversation=conversation)
    entries = await store.save(result, **kw)
    return result, entries


def test_a_multi_turn_run_with_tool_calls_is_stored_and_reloaded_from_the_file(tmp_path):
    path = tmp_path / "chat.duckdb"
    agent = weather_agent()

    async def first():
        with Memory(storage=DuckDBStorage(path)) as memory:
            store = ThreadRecallConversationStore(memory)
            one, saved_one = await turn(store, agent, "c1", "Weather in Lisbon?")
            two, saved_two = await turn(store, agent, "c1", "And tomorrow?")
            return one, saved_one, two, saved_two

    one, saved_one, two, saved_two = asyncio.run(first())
    assert len(saved_one) == len(one.new_messages()) and len(saved_two) == len(two.new_messages())
    assert saved_two[0].parent_id == saved_one[-1].id
    parts = [p for m in two.all_messages() for p in m.parts]
    assert any(isinstance(p, ToolCallPart) for p in parts) and any(isinstance(p, ToolReturnPart) for p in parts)
    assert len(two.all_messages()) == len(one.all_messages()) + len(two.new_messages())

    async def reopened():
        with Memory(storage=DuckDBStorage(path)) as memory:
            store = ThreadRecallConversationStore(memory)
            loaded = await store.load("c1")
            entries = await store.load_entries("c1")
            last = await store.load("c1", limit=2)
            texts = [m.text for m in memory.recall("pydantic-ai:c1", per_page=False).messages]
            return loaded, entries, last, texts

    loaded, entries, last, texts = asyncio.run(reopened())
    assert loaded.messages == two.all_messages()
    assert [e.id for e in entries] == [e.id for e in saved_one + saved_two]
    assert last.messages == two.all_messages()[-2:]
    assert "Weather in Lisbon?" in texts and "And tomorrow?" in texts
    assert isinstance(loaded.messages[0], ModelRequest) and isinstance(loaded.messages[-1], ModelResponse)


def test_a_stale_save_raises_the_conflict_error_and_writes_nothing(tmp_path):
    agent = Agent(TestModel())

    async def run():
        with Memory(storage=DuckDBStorage(tmp_path / "c.duckdb")) as memory:
            store = ThreadRecallConversationStore(memory)
            await turn(store, agent, "c1", "hello")
            a = await store.load("c1")
            b = await store.load("c1")
            ra = await agent.run("from a", conversation=a)
            rb = await agent.run("from b", conversation=b)
            await store.save(ra)
            stored = len(memory.recall("pydantic-ai:c1", per_page=False).messages)
            with pytest.raises(ConversationConflict):
                await store.save(rb)
            after = len(memory.recall("pydantic-ai:c1", per_page=False).messages)
            with pytest.raises(ConversationConflict):  # a new conversation under a taken id
                await store.save(Conversation(conversation_id="c1", messages=ra.all_messages()))
            fresh = await store.load("c1")
            return stored, after, fresh

    stored, after, fresh = asyncio.run(run())
    assert stored == after == 4
    assert [m.parts[0].content for m in fresh.messages if isinstance(m, ModelRequest)] == ["hello", "from a"]


def test_concurrent_saves_of_one_loaded_copy_let_exactly_one_through(tmp_path):
    agent = Agent(TestModel())

    async def run():
        with Memory(storage=DuckDBStorage(tmp_path / "c.duckdb")) as memory:
            store = ThreadRecallConversationStore(memory)
            await turn(store, agent, "c1", "hello")
            copies = [await store.load("c1") for _ in range(6)]
            results = [await agent.run(f"writer {i}", conversation=c) for i, c in enumerate(copies)]
            outcomes = await asyncio.gather(*(store.save(r) for r in results), return_exceptions=True)
            return outcomes, await store.load("c1")

    outcomes, final = asyncio.run(run())
    assert sum(not isinstance(o, Exception) for o in outcomes) == 1
    assert all(isinstance(o, ConversationConflict) for o in outcomes if isinstance(o, Exception))
    assert len(final.messages) == 4


def test_fork_shares_entries_and_survives_the_deletion_of_its_source(tmp_path):
    agent = Agent(TestModel())

    async def run():
        with Memory(storage=DuckDBStorage(tmp_path / "f.duckdb")) as memory:
            store = ThreadRecallConversationStore(memory)
            await turn(store, agent, "src", "one")
            await turn(store, agent, "src", "two")
            source_entries = await store.load_entries("src")
            fork = await store.fork("src", at=2, new_conversation_id="fork")
            fork_run = await agent.run("three on the fork", conversation=fork)
            await store.save(fork_run)
            fork_entries = await store.load_entries("fork")
            record = await store.read_record("fork")
            with pytest.raises(ConversationConflict):
                await store.fork("src", new_conversation_id="fork")
            await store.delete("src")
            gone = await store.load("src")
            kept = await store.load("fork")
            left = {m.id for m in memory.recall("pydantic-ai:src", per_page=False).messages}
            await store.delete("fork")
            threads = [t.id for t in memory.list_threads(per_page=False).threads]
            return source_entries, fork_entries, record, gone, kept, left, fork_run, threads

    source_entries, fork_entries, record, gone, kept, left, fork_run, threads = asyncio.run(run())
    assert [e.id for e in fork_entries[:2]] == [e.id for e in source_entries[:2]]
    assert record.forked_from == "src" and record.forked_at == source_entries[1].id
    assert gone is None and kept.messages == fork_run.all_messages()
    assert left == {e.id for e in source_entries[:2]}  # what the fork still uses
    assert threads == []


def test_branch_keeps_the_old_history_reachable(tmp_path):
    agent = Agent(TestModel())

    async def run():
        with Memory(storage=DuckDBStorage(tmp_path / "b.duckdb")) as memory:
            store = ThreadRecallConversationStore(memory)
            await turn(store, agent, "c", "one")
            await turn(store, agent, "c", "two")
            before = await store.load_entries("c")
            loaded = await store.load("c")
            branched = await store.branch("c", at=2, expected_revision=loaded.revision)
            await store.save(await agent.run("two again", conversation=branched))
            record = await store.read_record("c")
            back = await store.branch("c", from_entry=before[-1].id, expected_revision=record.revision)
            return before, record, back

    before, record, back = asyncio.run(run())
    assert record.branches == [before[-1].id]
    assert [m.parts[0].content for m in back.messages if isinstance(m, ModelRequest)] == ["one", "two"]


def test_scopes_list_and_guard_conversations(tmp_path):
    agent = Agent(TestModel())

    async def run():
        with Memory(storage=DuckDBStorage(tmp_path / "s.duckdb")) as memory:
            store = ThreadRecallConversationStore(memory)
            for cid, scope in [("a1", "alice"), ("b1", "bob"), ("a2", "alice"), ("n", None)]:
                await turn(store, agent, cid, "hi", **({"scope": scope} if scope else {}))
            alice = [r.conversation_id for r in await store.list_conversations(scope="alice")]
            every = [r.conversation_id for r in await store.list_conversations()]
            newest = [r.conversation_id for r in await store.list_conversations(limit=1)]
            hidden = await store.load("a1", scope="bob")
            await store.delete("a1", scope="bob")  # another scope: left alone
            still = await store.load("a1", scope="alice")
            owners = {t.id: t.resource_id for t in memory.list_threads(per_page=False).threads}
            return alice, every, newest, hidden, still, owners

    alice, every, newest, hidden, still, owners = asyncio.run(run())
    assert alice == ["a2", "a1"] and sorted(every) == ["a1", "a2", "b1", "n"] and newest == ["n"]
    assert hidden is None and still is not None
    assert owners == {"pydantic-ai:a1": "alice", "pydantic-ai:a2": "alice", "pydantic-ai:b1": "bob",
                      "pydantic-ai:n": "pydantic-ai"}
