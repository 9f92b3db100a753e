"""The LlamaIndex chat stores under SimpleChatEngine and LlamaIndex's Memory (with archiving),
using LlamaIndex's MockLLM, on a DuckDB file; and the behaviour its chat-store tests ask for."""

from __future__ import annotations

import asyncio
import doctest
import random
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.base.llms.types import (
    AudioBlock,
    ChatMessage,
    DocumentBlock,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import MockLLM
from llama_index.core.memory import BaseMemoryBlock, ChatMemoryBuffer
from llama_index.core.memory import Memory as LlamaMemory
from llama_index.core.storage.chat_store.base_db import MessageStatus
from threadrecall import Memory
from threadrecall.errors import InvalidArgumentError, ResourceMismatchError
from threadrecall.integrations import llama_index as integration
from threadrecall.integrations.llama_index import ThreadRecallChatStore, ThreadRecallDBChatStore
from threadrecall.storage import DuckDBStorage


def words(text: str) -> list[str]:
    return text.split()


@pytest.fixture
def db(tmp_path):
    return tmp_path / "llama.duckdb"


@pytest.fixture
def memory(db):
    memory = Memory(storage=DuckDBStorage(db))
    yield memory
    memory.close()


@pytest.fixture
def store(memory):
    return ThreadRecallChatStore(memory)


@pytest.fixture
def db_store(memory):
    return ThreadRecallDBChatStore(memory)


def msg(content: str, role: str = "user") -> ChatMessage:
    return ChatMessage(role=role, content=content)


def run(coro):
    return asyncio.run(coro)


# ----------------------------------------------------------------------------- engines and memory

def test_simple_chat_engine_keeps_its_history_in_the_store(memory, db):
    buffer = ChatMemoryBuffer.from_defaults(chat_store=ThreadRecallChatStore(memory), chat_store_key="alice",
                                            token_limit=3000, tokenizer_fn=words)
    engine = SimpleChatEngine.from_defaults(llm=MockLLM(), memory=buffer,
                                            system_prompt="You are a helpful assistant.")
    first = engine.chat("Hello there")
    second = run(engine.achat("What did I say?"))
    history = ThreadRecallChatStore(memory).get_messages("alice")
    assert [(m.role.value, m.content) for m in history] == [
        ("user", "Hello there"), ("assistant", str(first)),
        ("user", "What did I say?"), ("assistant", str(second))]
    # the second call's prompt carried the first turn (MockLLM echoes its prompt)
    assert "Hello there" in str(second)

    memory.close()
    reopened = Memory(storage=DuckDBStorage(db))
    try:
        again = ChatMemoryBuffer.from_defaults(chat_store=ThreadRecallChatStore(reopened), chat_store_key="alice",
                                               token_limit=3000, tokenizer_fn=words)
        assert again.get_all() == history
        engine = SimpleChatEngine.from_defaults(llm=MockLLM(), memory=again)
        engine.chat("Third")
        assert len(ThreadRecallChatStore(reopened).get_messages("alice")) == 6
    finally:
        reopened.close()


class Recorder(BaseMemoryBlock[str]):
    """A memory block that keeps what the short-term memory flushes to it."""

    flushed: list[Any]

    async def _aget(self, messages: list[ChatMessage] | None = None, **kwargs: Any) -> str:
        return " | ".join(m.content or "" for m in self.flushed)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        self.flushed.extend(messages)


def test_llama_index_memory_archives_what_it_flushes(memory, db):
    block = Recorder(name="recorder", flushed=[])
    llama = LlamaMemory.from_defaults(
        session_id="session-1", chat_store=ThreadRecallDBChatStore(memory), token_limit=40,
        chat_history_token_ratio=0.5, token_flush_size=10, tokenizer_fn=words, memory_blocks=[block])
    sent = []
    for i in range(8):
        turn = [msg(f"question {i} about the weather in city {i}"),
                msg(f"answer {i}: it is sunny in city {i}", "assistant")]
        sent += turn
        llama.put_messages(turn)
    active = llama.get_all(status=MessageStatus.ACTIVE)
    archived = llama.get_all(status=MessageStatus.ARCHIVED)
    assert archived and active
    assert archived + active == sent  # archived are the oldest, in order; nothing lost
    assert active[0].role.value == "user"  # the queue starts at a turn
    assert [m.content for m in block.flushed] == [m.content for m in archived]
    assert sum(len(words(m.content)) for m in active) <= 20
    prompt = llama.get()
    assert prompt[-len(active):] == active  # the prompt ends with the active queue
    assert "question 0" in prompt[0].content  # and opens with the flushed memory block

    memory.close()
    reopened = Memory(storage=DuckDBStorage(db))
    try:
        store = ThreadRecallDBChatStore(reopened)
        assert run(store.get_messages("session-1", status=MessageStatus.ARCHIVED)) == archived
        assert run(store.get_messages("session-1")) == active
        assert run(store.count_messages("session-1", status=None)) == len(sent)
        stored = reopened.recall("session-1", per_page=False).messages
        assert {m.metadata["status"] for m in stored[:len(archived)]} == {"archived"}
    finally:
        reopened.close()


# ----------------------------------------------------------------------------- BaseChatStore

def test_reads_rebuild_only_messages_changed_since_the_last_read(memory):
    store = ThreadRecallChatStore(memory)
    for key in ("a", "b"):
        store.add_message(key, ChatMessage(role="user", content=f"{key} one"))
        store.add_message(key, ChatMessage(role="assistant", content=f"{key} two"))
    a, b = store.get_messages("a"), store.get_messages("b")
    assert store.get_messages("a")[0] is a[0] and store.get_messages("b")[1] is b[1]
    first = memory.recall("a").messages[0]
    memory.update_messages([{"id": first.id, "content": "a one, edited"}])
    again = store.get_messages("a")
    assert [m.content for m in again] == ["a one, edited", "a two"]
    assert again[0] is not a[0] and again[1] is a[1]
    assert store.delete_last_message("b").content == "b two"
    assert [m.content for m in store.get_messages("b")] == ["b one"]


def test_add_messages(store):
    for key in ("user1", "user2"):
        store.add_message(key, msg("hello"))
        store.add_message(key, msg("world"))
    assert store.get_messages("user1") == [msg("hello"), msg("world")]
    assert store.get_messages("user2") == [msg("hello"), msg("world")]
    assert store.get_keys() == ["user1", "user2"]
    store.add_message("user1", msg("first"), idx=0)
    assert store.get_messages("user1") == [msg("first"), msg("hello"), msg("world")]


def test_delete_messages(store):
    for key in ("user1", "user2"):
        store.add_message(key, msg("hello"))
        store.add_message(key, msg("world"))
    assert store.delete_messages("user1") == [msg("hello"), msg("world")]
    assert store.get_messages("user1") == []
    assert store.get_messages("user2") == [msg("hello"), msg("world")]
    assert store.get_keys() == ["user2"]
    assert store.delete_messages("nobody") is None


def test_delete_message_by_position(store):
    for text in ("hello", "world", "again"):
        store.add_message("user1", msg(text))
    assert store.delete_last_message("user1") == msg("again")
    assert store.delete_message("user1", 0) == msg("hello")
    assert store.get_messages("user1") == [msg("world")]
    assert store.delete_message("user1", -2) is None
    assert store.delete_message("user1", 5) is None
    assert store.get_messages("user1") == [msg("world")]
    assert store.delete_last_message("user1") == msg("world")
    assert store.delete_last_message("user1") is None
    assert store.delete_message("nobody", 0) is None


def test_set_messages_replaces(store):
    store.add_message("k", msg("initial"))
    store.set_messages("k", [msg("replaced1"), msg("replaced2", "assistant")])
    assert store.get_messages("k") == [msg("replaced1"), msg("replaced2", "assistant")]


def test_set_messages_of_the_history_with_more_after_it_writes_only_the_new_ones(store, memory):
    store.set_messages("k", [msg("q1"), msg("a1", "assistant")])
    ids = [m.id for m in memory.recall("k", per_page=False).messages]
    history = [*store.get_messages("k"), msg("q2"), msg("a2", "assistant")]
    store.set_messages("k", history)
    stored = memory.recall("k", per_page=False).messages
    assert [m.id for m in stored[:2]] == ids and len(stored) == 4
    assert store.get_messages("k") == history
    store.set_messages("k", history)  # the same list again: nothing to write
    assert [m.id for m in memory.recall("k", per_page=False).messages] == [m.id for m in stored]


def test_set_messages_stores_a_change_made_to_a_message_it_returned(store, memory, db):
    store.set_messages("k", [msg("q1"), msg("a1", "assistant")])
    history = store.get_messages("k")
    history[1].content = "a1, changed in place"
    store.set_messages("k", history)
    memory.close()
    reopened = Memory(storage=DuckDBStorage(db))
    try:
        assert ThreadRecallChatStore(reopened).get_messages("k") == [
            msg("q1"), msg("a1, changed in place", "assistant")]
    finally:
        reopened.close()


@pytest.mark.parametrize("change", ["edited", "shorter", "archived", "unmarked thread"])
def test_set_messages_of_any_other_list_replaces_the_stored_ones(store, db_store, memory, change):
    store.set_messages("k", [msg("q1"), msg("a1", "assistant")])
    ids = {m.id for m in memory.recall("k", per_page=False).messages}
    wanted = [msg("q1"), msg("a1", "assistant"), msg("q2")]
    if change == "edited":
        wanted[1] = msg("a1, edited", "assistant")
    elif change == "shorter":
        wanted = wanted[:1]
    elif change == "archived":  # the same messages, but the stored first one is archived
        run(db_store.archive_oldest_messages("k", 1))
    else:  # a thread the store did not create: it becomes one of the store's keys
        memory.update_thread("k", metadata={"chat_store": None})
        assert store.get_keys() == []
    store.set_messages("k", wanted)
    stored = memory.recall("k", per_page=False).messages
    assert store.get_messages("k") == wanted
    assert ids.isdisjoint(m.id for m in stored)
    assert {m.metadata["status"] for m in stored} == {"active"}
    assert store.get_keys() == ["k"]


def ids_of(memory, key: str) -> list[str]:
    return [m.id for m in memory.recall(key, per_page=False).messages]


def saved_as(message: ChatMessage) -> tuple[Any, ...]:
    """What a store set to ``message`` stores of it (role, parts, metadata)."""
    row = integration.message_of(message)
    return row["role"], row["content"]["parts"], {**row["metadata"], "status": "active"}


def stored_as(memory, key: str) -> list[tuple[Any, ...]]:
    return [(m.role, m.content.parts, m.metadata) for m in memory.recall(key, per_page=False).messages]


def test_set_messages_keeps_stored_messages_equal_to_fresh_ones(store, memory):
    # a stateless server rebuilds the history it gets from its client: new objects, equal ones
    store.set_messages("k", EVERY_KIND)
    ids = ids_of(memory, "k")
    fresh = [ChatMessage.model_validate_json(m.model_dump_json()) for m in store.get_messages("k")]
    assert all(a is not b for a, b in zip(fresh, store.get_messages("k")))
    store.set_messages("k", [*fresh, msg("next")])
    assert ids_of(memory, "k")[:len(ids)] == ids and len(ids_of(memory, "k")) == len(ids) + 1
    assert store.get_messages("k") == [*EVERY_KIND, msg("next")]


@pytest.mark.parametrize("change", [
    "tool argument", "kwargs nested", "image detail", "thinking tokens", "text", "role", "new block",
    "fresh copy, tool argument"])
def test_set_messages_stores_a_change_deep_inside_a_message(store, memory, db, change):
    store.set_messages("k", EVERY_KIND)
    history = store.get_messages("k")
    store.set_messages("k", history)  # compared once unchanged: the store knows them as stored
    ids = ids_of(memory, "k")
    if change == "tool argument":
        history[3].blocks[2].tool_kwargs["index"] = 2
    elif change == "kwargs nested":
        history[5].additional_kwargs["tool_calls"][0]["id"] = "y"
    elif change == "image detail":
        history[2].blocks[1].detail = "low"
    elif change == "thinking tokens":
        history[3].blocks[0].num_tokens = 6
    elif change == "text":
        history[6].blocks[0].text = "old role, edited"
    elif change == "role":
        history[0].role = "user"
    elif change == "new block":
        history[7].blocks.append(TextBlock(text="more"))
    else:
        history = [m.model_copy(deep=True) for m in history]
        history[3].blocks[2].tool_kwargs["index"] = 2
    wanted = [m.model_copy(deep=True) for m in history]
    store.set_messages("k", history)
    assert set(ids).isdisjoint(ids_of(memory, "k"))
    assert stored_as(memory, "k") == [saved_as(m) for m in wanted]
    memory.close()
    reopened = Memory(storage=DuckDBStorage(db))
    try:
        assert ThreadRecallChatStore(reopened).get_messages("k") == wanted
    finally:
        reopened.close()


@pytest.mark.parametrize("change", ["shorter", "reordered", "one dropped", "empty"])
def test_set_messages_of_the_history_rearranged_replaces_it(store, memory, change):
    store.set_messages("k", [msg("q1"), msg("a1", "assistant"), msg("q2"), msg("a2", "assistant")])
    history = store.get_messages("k")
    store.set_messages("k", history)
    ids = ids_of(memory, "k")
    wanted = {"shorter": history[:3], "reordered": [history[1], history[0], *history[2:]],
              "one dropped": [history[0], *history[2:]], "empty": []}[change]
    store.set_messages("k", wanted)
    assert store.get_messages("k") == wanted
    assert set(ids).isdisjoint(ids_of(memory, "k"))
    assert stored_as(memory, "k") == [saved_as(m) for m in wanted]


@pytest.mark.parametrize("writer", ["update", "archive", "delete", "insert before", "other store"])
def test_set_messages_after_another_writer_changed_the_thread(store, db_store, memory, writer):
    store.set_messages("k", [msg("q1"), msg("a1", "assistant"), msg("q2")])
    history = store.get_messages("k")
    store.set_messages("k", history)
    first = memory.recall("k", per_page=False).messages
    if writer == "update":
        memory.update_messages([{"id": first[1].id, "content": "a1, by someone else"}])
    elif writer == "archive":
        run(db_store.archive_oldest_messages("k", 1))
    elif writer == "delete":
        memory.delete_messages([first[2].id])
    elif writer == "insert before":
        memory.save_messages([{"thread_id": "k", "role": "user", "content": "early",
                               "created_at": first[0].created_at - timedelta(seconds=1)}])
    else:
        other = ThreadRecallChatStore(memory)
        other.set_messages("k", [msg("q1"), msg("a1, elsewhere", "assistant"), msg("q2")])
    wanted = [*history, msg("a2", "assistant")]
    store.set_messages("k", wanted)
    assert store.get_messages("k") == wanted
    assert stored_as(memory, "k") == [saved_as(m) for m in wanted]
    if writer == "delete":  # what is left is the first of the list: it stays
        assert ids_of(memory, "k")[:2] == [m.id for m in first[:2]] and len(ids_of(memory, "k")) == 4
    else:
        assert {m.id for m in first}.isdisjoint(ids_of(memory, "k"))


def test_set_messages_replaces_messages_saved_by_other_means(store, memory):
    store.add_message("k", msg("q1"))
    memory.save_messages([{"thread_id": "k", "role": "assistant", "content": "typed elsewhere"}])
    history = store.get_messages("k")
    ids = ids_of(memory, "k")
    store.set_messages("k", history)  # what the store reads of the second one would store it otherwise
    assert set(ids).isdisjoint(ids_of(memory, "k"))
    assert stored_as(memory, "k") == [saved_as(m) for m in history]


@pytest.mark.parametrize("seed", range(6))
def test_set_messages_keeps_the_stored_messages_exactly_when_they_begin_the_list(store, memory, seed):
    """Random edits of a read history (in place, on copies, moves, cuts, additions): the stored
    messages stay exactly when each is what saving its place in the new list would store."""
    rng = random.Random(seed)
    plain = [msg(f"q{i}") if i % 2 == 0 else msg(f"a{i}", "assistant") for i in range(6)]
    store.set_messages("k", [*EVERY_KIND, *plain])
    for _ in range(25):
        history = store.get_messages("k")
        stored = stored_as(memory, "k")
        ids = ids_of(memory, "k")
        edit = rng.choice(["none", "copy", "text", "kwargs", "same value", "tool", "swap", "cut", "add"])
        new = list(history)
        i = rng.randrange(len(new))
        if edit == "copy":
            new[i] = new[i].model_copy(deep=True)
        elif edit == "text" and new[i].blocks and isinstance(new[i].blocks[0], TextBlock):
            new[i].blocks[0].text += rng.choice(["", "!"])
        elif edit == "kwargs":
            new[i].additional_kwargs[rng.choice(["user_id", "extra"])] = rng.choice([7, 7.0, True, "7"])
        elif edit == "same value":
            new[i] = new[i].model_copy(update={"additional_kwargs": dict(new[i].additional_kwargs)})
        elif edit == "tool":
            for block in (b for m in new for b in m.blocks if isinstance(b, ToolCallBlock)):
                block.tool_kwargs["index"] = rng.choice([1, 2])
        elif edit == "swap":
            j = rng.randrange(len(new))
            new[i], new[j] = new[j], new[i]
        elif edit == "cut":
            new = new[:rng.randrange(len(new) + 1)] or [msg("only")]
        if edit == "add" or rng.random() < 0.5:
            new.append(msg(f"more {rng.random()}", rng.choice(["user", "assistant"])))
        wanted = [m.model_copy(deep=True) for m in new]
        kept = len(stored) <= len(new) and all(saved_as(m) == s for m, s in zip(new, stored))
        store.set_messages("k", new)
        after = ids_of(memory, "k")
        if kept:
            assert after[:len(ids)] == ids and stored_as(memory, "k")[:len(stored)] == stored, (seed, edit)
        else:
            assert set(ids).isdisjoint(after), (seed, edit)
        assert stored_as(memory, "k") == [saved_as(m) for m in wanted], (seed, edit)
        assert store.get_messages("k") == wanted, (seed, edit)


def test_non_ascii_text(store, memory, db):
    store.add_message("user1", msg("ハロー héllo"))
    memory.close()
    reopened = Memory(storage=DuckDBStorage(db))
    try:
        assert ThreadRecallChatStore(reopened).get_messages("user1") == [msg("ハロー héllo")]
    finally:
        reopened.close()


def test_async_methods(store):
    run(store.aset_messages("k", [msg("a")]))
    run(store.async_add_message("k", msg("b")))
    assert run(store.aget_messages("k")) == [msg("a"), msg("b")]
    assert run(store.aget_keys()) == ["k"]
    assert run(store.adelete_last_message("k")) == msg("b")
    assert run(store.adelete_message("k", 0)) == msg("a")
    assert run(store.adelete_messages("k")) == []
    assert run(store.aget_keys()) == []


EVERY_KIND = [
    ChatMessage(role="system", content="Be terse."),
    ChatMessage(role="developer", content="From the developer."),
    ChatMessage(role="user", blocks=[
        TextBlock(text="What is in these?"),
        ImageBlock(image=b"\x89PNG\r\n\x1a\n0000", image_mimetype="image/png", detail="high"),
        ImageBlock(url="https://example.com/cat.png"),
        AudioBlock(audio=b"RIFF0000WAVE", format="wav"),
        DocumentBlock(data=b"%PDF-1.4 hello", title="notes.pdf"),
    ], additional_kwargs={"user_id": 7}),
    ChatMessage(role="assistant", blocks=[
        ThinkingBlock(content="Look at each file.", num_tokens=5),
        TextBlock(text="Checking."),
        ToolCallBlock(tool_call_id="call-1", tool_name="describe", tool_kwargs={"index": 1}),
    ]),
    ChatMessage(role="tool", content="a tabby cat", additional_kwargs={"tool_call_id": "call-1", "name": "describe"}),
    ChatMessage(role="assistant", content="A tabby cat.", additional_kwargs={"tool_calls": [{"id": "x"}]}),
    ChatMessage(role="chatbot", content="old role"),
    ChatMessage(role="user", blocks=[]),
]


def test_every_kind_of_message_comes_back_equal(store, memory, db):
    store.set_messages("kinds", EVERY_KIND)
    assert store.get_messages("kinds") == EVERY_KIND
    memory.close()
    reopened = Memory(storage=DuckDBStorage(db))
    try:
        assert ThreadRecallChatStore(reopened).get_messages("kinds") == EVERY_KIND
        stored = reopened.recall("kinds", per_page=False).messages
        assert [m.role for m in stored] == ["system", "system", "user", "assistant", "tool",
                                            "assistant", "assistant", "user"]
        assert stored[2].text == "What is in these?"
        assert [p["type"] for p in stored[2].content.parts] == ["text", "file", "file", "file", "file"]
        assert stored[3].content.parts[2]["tool_invocation"] == {
            "state": "call", "tool_call_id": "call-1", "tool_name": "describe", "args": {"index": 1}}
    finally:
        reopened.close()


def test_a_fixed_resource_owns_every_key_and_others_are_refused(memory):
    alice = ThreadRecallChatStore(memory, resource_id="alice")
    alice.add_message("chat-1", msg("mine"))
    assert memory.get_thread_by_id("chat-1").resource_id == "alice"
    mallory = ThreadRecallChatStore(memory, resource_id="mallory")
    with pytest.raises(ResourceMismatchError):
        mallory.get_messages("chat-1")
    with pytest.raises(ResourceMismatchError):
        mallory.set_messages("chat-1", [])
    with pytest.raises(ResourceMismatchError):
        mallory.delete_messages("chat-1")
    assert mallory.get_keys() == []
    assert alice.get_messages("chat-1") == [msg("mine")]


@pytest.mark.parametrize("bad", ["text", msg("one"), [msg("ok"), {"role": "user"}]])
def test_bad_input_is_refused_and_nothing_is_written(store, bad):
    with pytest.raises(InvalidArgumentError):
        store.set_messages("k", bad)
    with pytest.raises(InvalidArgumentError):
        run(ThreadRecallDBChatStore(store.memory).add_messages("k", bad))
    assert store.get_messages("k") == [] and store.get_keys() == []


def test_blank_key_is_refused(store):
    with pytest.raises(InvalidArgumentError):
        store.add_message(" ", msg("x"))


# ----------------------------------------------------------------------------- AsyncDBChatStore

def test_db_store_add_get_count(db_store):
    run(db_store.add_message("user1", msg("hello")))
    run(db_store.add_message("user1", msg("world", "assistant")))
    messages = run(db_store.get_messages("user1"))
    assert [(m.role.value, m.content) for m in messages] == [("user", "hello"), ("assistant", "world")]
    assert run(db_store.get_messages("nonexistent")) == []
    assert run(db_store.count_messages("user1")) == 2
    assert run(db_store.count_messages("nonexistent")) == 0


def test_db_store_reads_are_not_changed_by_what_their_reader_writes_into_them(db_store):
    """llama_index's Memory writes its memory blocks into the messages it reads."""
    run(db_store.add_message("user1", msg("hello")))
    first = run(db_store.get_messages("user1"))
    first[0].blocks = [TextBlock(text="<memory>"), *first[0].blocks]
    assert [m.content for m in run(db_store.get_messages("user1"))] == ["hello"]


def test_db_store_reads_share_nothing_with_each_other(db_store, memory):
    run(db_store.add_messages("k", EVERY_KIND))
    first = run(db_store.get_messages("k", status=None))
    assert first == EVERY_KIND
    first[2].additional_kwargs["user_id"] = 8
    first[3].blocks[2].tool_kwargs["index"] = 2
    first[5].additional_kwargs["tool_calls"][0]["id"] = "y"
    first[6].blocks[0].text = "changed"
    for status in (None, MessageStatus.ACTIVE):
        again = run(db_store.get_messages("k", status=status))
        assert again == EVERY_KIND and all(a is not b for a, b in zip(again, first))
    assert [m.model_dump() for m in again] == [m.model_dump() for m in EVERY_KIND]
    assert [m.model_fields_set for m in again] == [integration.chat_message(m).model_fields_set
                                                   for m in memory.recall("k", per_page=False).messages]
    assert run(db_store.delete_message("k", 5)) == EVERY_KIND[5]
    assert run(db_store.archive_oldest_messages("k", 1)) == EVERY_KIND[:1]


@pytest.mark.parametrize("writer", ["update", "archive", "delete", "insert before", "other store"])
def test_db_store_reads_follow_other_writers(db_store, store, memory, writer):
    run(db_store.add_messages("k", [msg("q1"), msg("a1", "assistant"), msg("q2")]))
    for status in (None, MessageStatus.ACTIVE, MessageStatus.ARCHIVED):
        run(db_store.get_messages("k", status=status))
    first = memory.recall("k", per_page=False).messages
    if writer == "update":
        memory.update_messages([{"id": first[1].id, "content": "a1, by someone else"}])
    elif writer == "archive":
        memory.update_messages([{"id": first[0].id, "metadata": {"status": "archived"}}])
    elif writer == "delete":
        memory.delete_messages([first[2].id])
    elif writer == "insert before":
        memory.save_messages([{"thread_id": "k", "role": "user", "content": "early",
                               "created_at": first[0].created_at - timedelta(seconds=1),
                               "metadata": {"status": "active"}}])
    else:
        store.set_messages("k", [msg("q1"), msg("a1, elsewhere", "assistant")])
    for status in (None, "active", "archived"):
        wanted = [integration.chat_message(m) for m in memory.recall(
            "k", per_page=False, filter={"metadata": {"status": status}} if status else None).messages]
        assert run(db_store.get_messages("k", status=status)) == wanted, status
        assert run(db_store.count_messages("k", status=status)) == len(wanted), status


def test_db_store_set_and_delete(db_store):
    run(db_store.add_messages("k", [msg("initial"), msg("other")]))
    run(db_store.set_messages("k", [msg("replaced1"), msg("replaced2")]))
    assert [m.content for m in run(db_store.get_messages("k"))] == ["replaced1", "replaced2"]
    assert run(db_store.delete_message("k", 0)).content == "replaced1"
    assert run(db_store.delete_message("k", 3)) is None
    run(db_store.add_message("j", msg("kept")))
    run(db_store.delete_messages("k"))
    assert run(db_store.get_messages("k")) == [] and len(run(db_store.get_messages("j"))) == 1
    assert run(db_store.get_keys()) == ["j"]


def test_db_store_oldest_archive_and_delete(db_store):
    run(db_store.add_messages("k", [msg("oldest"), msg("middle", "assistant"), msg("newest")]))
    assert [m.content for m in run(db_store.archive_oldest_messages("k", 1))] == ["oldest"]
    assert [m.content for m in run(db_store.get_messages("k", status=MessageStatus.ACTIVE))] == ["middle", "newest"]
    assert [m.content for m in run(db_store.get_messages("k", status=MessageStatus.ARCHIVED))] == ["oldest"]
    assert [m.content for m in run(db_store.get_messages("k", status=None))] == ["oldest", "middle", "newest"]
    assert [m.content for m in run(db_store.delete_oldest_messages("k", 1))] == ["middle"]
    assert [m.content for m in run(db_store.get_messages("k", status=None))] == ["oldest", "newest"]
    run(db_store.delete_messages("k", status=MessageStatus.ARCHIVED))
    assert [m.content for m in run(db_store.get_messages("k", status=None))] == ["newest"]


def test_db_store_limit_and_offset(db_store):
    run(db_store.add_messages("p", [msg(f"message{i}") for i in range(1, 6)]))
    assert [m.content for m in run(db_store.get_messages("p", limit=2))] == ["message1", "message2"]
    assert [m.content for m in run(db_store.get_messages("p", offset=2))] == ["message3", "message4", "message5"]
    assert [m.content for m in run(db_store.get_messages("p", limit=2, offset=1))] == ["message2", "message3"]
    with pytest.raises(InvalidArgumentError):
        run(db_store.get_messages("p", limit=-1))
    with pytest.raises(InvalidArgumentError):
        run(db_store.archive_oldest_messages("p", -1))
    with pytest.raises(InvalidArgumentError):
        run(db_store.get_messages("p", status="pending"))


def test_both_stores_read_the_same_messages(store, db_store):
    run(db_store.add_messages("shared", [msg("one"), msg("two")]))
    store.add_message("shared", msg("three"))
    assert [m.content for m in run(db_store.get_messages("shared"))] == ["one", "two", "three"]
    assert [m.content for m in store.get_messages("shared")] == ["one", "two", "three"]


def test_messages_saved_by_other_means_read_as_chat_messages(memory, store):
    memory.create_thread("k", thread_id="k", metadata={"chat_store": "llama_index"})
    memory.save_messages([{"thread_id": "k", "role": "assistant", "content": "typed elsewhere"}])
    assert store.get_messages("k") == [ChatMessage(role="assistant", content="typed elsewhere")]


def test_docstring_examples():
    assert doctest.testmod(integration).failed == 0
