"""ThreadRecallChatMessageHistory under LangChain's RunnableWithMessageHistory, with LangChain's
own fake chat model, on a DuckDB file: system, AI with tool calls, tool and multimodal messages
round-trip equal."""

from __future__ import annotations

import asyncio
import doctest

import pytest

pytest.importorskip("langchain_core")

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory
from threadrecall import Memory
from threadrecall.errors import InvalidArgumentError, ResourceMismatchError
from threadrecall.integrations import langchain as integration
from threadrecall.integrations.langchain import ThreadRecallChatMessageHistory
from threadrecall.storage import DuckDBStorage

IMAGE = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


@pytest.fixture
def db(tmp_path):
    return tmp_path / "langchain.duckdb"


@pytest.fixture
def memory(db):
    memory = Memory(storage=DuckDBStorage(db))
    yield memory
    memory.close()


def turns():
    """Three turns: (input messages, the model's reply)."""
    return [
        ([SystemMessage("You describe pictures."),
          HumanMessage([{"type": "text", "text": "What is in this picture?"},
                        {"type": "image_url", "image_url": {"url": IMAGE, "detail": "high"}}])],
         AIMessage("", id="ai-1", tool_calls=[{"name": "classify", "args": {"image": 0}, "id": "call-1"}],
                   response_metadata={"model_name": "fake"},
                   usage_metadata={"input_tokens": 12, "output_tokens": 3, "total_tokens": 15})),
        ([ToolMessage("a tabby cat", tool_call_id="call-1", name="classify", artifact={"score": 0.93})],
         AIMessage([{"type": "reasoning", "reasoning": "The tool said tabby.", "id": "rs-1"},
                    {"type": "text", "text": "A tabby cat."}], id="ai-2")),
        ([HumanMessage("Thanks!", id="h-3")], AIMessage("You're welcome.", id="ai-3")),
    ]


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_runnable_with_message_history_round_trips_every_kind(memory, db, mode):
    script = turns()
    seen = []

    def record(prompt):
        seen.append(prompt.to_messages())
        return prompt

    model = GenericFakeChatModel(messages=iter([reply for _, reply in script]))
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), MessagesPlaceholder("input")])
    chain = RunnableWithMessageHistory(
        prompt | RunnableLambda(record) | model,
        lambda session_id: ThreadRecallChatMessageHistory(memory, session_id, resource_id="alice"),
        input_messages_key="input", history_messages_key="history",
    )
    config = {"configurable": {"session_id": "pictures"}}
    for inputs, _ in script:
        if mode == "invoke":
            chain.invoke({"input": inputs}, config)
        else:
            asyncio.run(chain.ainvoke({"input": inputs}, config))

    replies = ThreadRecallChatMessageHistory(memory, "pictures", resource_id="alice").messages
    expected = [m for inputs, _ in script for m in inputs]
    # the stored conversation is the inputs and the model's replies, in order
    assert [m for i, m in enumerate(replies) if i not in (2, 4, 6)] == expected
    produced = [replies[2], replies[4], replies[6]]
    assert [m.content for m in produced] == [r.content for _, r in script]
    assert [m.id for m in produced] == ["ai-1", "ai-2", "ai-3"]
    assert produced[0].tool_calls == script[0][1].tool_calls
    assert produced[0].usage_metadata == script[0][1].usage_metadata
    # the last turn's prompt was the whole stored history, equal message for message
    assert seen[-1] == replies[:5] + script[2][0]

    memory.close()
    reopened = Memory(storage=DuckDBStorage(db))
    try:
        assert ThreadRecallChatMessageHistory(reopened, "pictures", resource_id="alice").messages == replies
        stored = reopened.recall("pictures", per_page=False).messages
        assert [m.role for m in stored] == ["system", "user", "assistant", "tool", "assistant", "user", "assistant"]
        assert stored[1].text == "What is in this picture?"
        assert stored[1].content.parts[1]["url"] == IMAGE
        call = stored[2].content.parts[-1]["tool_invocation"]
        assert (call["tool_name"], call["args"]) == ("classify", {"image": 0})
        assert stored[3].content.parts[0]["tool_invocation"]["result"] == "a tabby cat"
    finally:
        reopened.close()


EVERY_KIND = [
    SystemMessage("Be terse.", id="s-1"),
    HumanMessage([{"type": "text", "text": "look"}, "a plain string block",
                  {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
                  {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"},
                  {"type": "file", "url": "https://example.com/a.pdf", "mime_type": "application/pdf"},
                  {"type": "audio", "source_type": "base64", "data": "UklGRg==", "mime_type": "audio/wav"},
                  {"type": "custom", "anything": [1, 2]}], name="ann", additional_kwargs={"k": "v"}),
    AIMessage("Let me check.", tool_calls=[{"name": "a", "args": {"x": 1}, "id": "c1"},
                                           {"name": "b", "args": {}, "id": "c2"}],
              invalid_tool_calls=[{"name": "c", "args": "{bad", "id": "c3", "error": "bad json",
                                   "type": "invalid_tool_call"}]),
    ToolMessage("one", tool_call_id="c1"),
    ToolMessage([{"type": "text", "text": "two"}, {"type": "image_url", "image_url": {"url": IMAGE}}],
                tool_call_id="c2", status="error"),
    AIMessage([{"type": "thinking", "thinking": "hmm", "signature": "sig"}, {"type": "text", "text": "Done."}]),
    ChatMessage("A critique.", role="critic"),
    ChatMessage("From the developer.", role="developer"),
    FunctionMessage("42", name="answer"),
    AIMessageChunk("partial", id="chunk-1"),
    HumanMessage(""),
]


def test_every_kind_of_message_comes_back_equal(memory, db):
    history = ThreadRecallChatMessageHistory(memory, "kinds", resource_id="r")
    history.add_messages(EVERY_KIND)
    assert history.messages == EVERY_KIND
    assert [type(m) for m in history.messages] == [type(m) for m in EVERY_KIND]
    memory.close()
    reopened = Memory(storage=DuckDBStorage(db))
    try:
        assert ThreadRecallChatMessageHistory(reopened, "kinds", resource_id="r").messages == EVERY_KIND
        roles = [m.role for m in reopened.recall("kinds", per_page=False).messages]
        assert roles == ["system", "user", "assistant", "tool", "tool", "assistant", "assistant",
                         "system", "tool", "assistant", "user"]
    finally:
        reopened.close()


def test_sync_and_async_share_one_history(memory):
    history = ThreadRecallChatMessageHistory(memory, "both", resource_id="r")
    assert isinstance(history, BaseChatMessageHistory)
    history.add_user_message("one")
    asyncio.run(history.aadd_messages([AIMessage("two")]))
    history.add_ai_message("three")
    assert [m.content for m in asyncio.run(history.aget_messages())] == ["one", "two", "three"]
    asyncio.run(history.aclear())
    assert history.messages == []
    history.add_message(HumanMessage("again"))
    assert [m.content for m in history.messages] == ["again"]
    history.clear()
    assert asyncio.run(history.aget_messages()) == []


def test_a_message_changed_through_memory_reads_changed(memory):
    """A read reuses the previous read's conversion only of messages that are unchanged."""
    history = ThreadRecallChatMessageHistory(memory, "edited", resource_id="r")
    history.add_messages([HumanMessage("first"), AIMessage("second")])
    before = history.messages
    again = history.messages
    assert again == before and again[0] is before[0]
    first = memory.recall("edited").messages[0]
    memory.update_messages([{"id": first.id, "content": "first, edited"}])
    memory.update_messages([{"id": first.id, "metadata": {"note": "kept"}}])
    after = history.messages
    assert [m.content for m in after] == ["first, edited", "second"]
    assert after[0] is not before[0] and after[1] is before[1]
    history.clear()
    history.add_messages([HumanMessage("anew")])
    assert [m.content for m in history.messages] == ["anew"]


def test_histories_of_different_threads_are_separate(memory):
    a = ThreadRecallChatMessageHistory(memory, "a", resource_id="r")
    b = ThreadRecallChatMessageHistory(memory, "b", resource_id="r")
    a.add_user_message("for a")
    b.add_user_message("for b")
    a.clear()
    assert a.messages == [] and [m.content for m in b.messages] == ["for b"]


def test_messages_saved_by_other_means_read_as_langchain_messages(memory):
    memory.create_thread("r", thread_id="other")
    memory.save_messages([
        {"thread_id": "other", "role": "user", "content": "typed elsewhere"},
        {"thread_id": "other", "role": "assistant", "content": {"parts": [{"type": "tool-invocation",
         "tool_invocation": {"state": "call", "tool_call_id": "t1", "tool_name": "f", "args": {"a": 1}}}]}},
        {"thread_id": "other", "role": "tool", "content": {"parts": [{"type": "tool-invocation",
         "tool_invocation": {"state": "result", "tool_call_id": "t1", "tool_name": "f", "result": "ok"}}]}},
    ])
    human, ai, tool = ThreadRecallChatMessageHistory(memory, "other", resource_id="r").messages
    assert human == HumanMessage("typed elsewhere")
    assert ai.tool_calls == [{"name": "f", "args": {"a": 1}, "id": "t1", "type": "tool_call"}]
    assert (tool.content, tool.tool_call_id) == ("ok", "t1")


def test_another_resource_cannot_read_or_clear_the_thread(memory):
    ThreadRecallChatMessageHistory(memory, "private", resource_id="bob").add_user_message("secret")
    intruder = ThreadRecallChatMessageHistory(memory, "private", resource_id="mallory")
    with pytest.raises(ResourceMismatchError):
        _ = intruder.messages
    with pytest.raises(ResourceMismatchError):
        intruder.clear()
    with pytest.raises(ResourceMismatchError):
        asyncio.run(intruder.aclear())
    assert len(ThreadRecallChatMessageHistory(memory, "private", resource_id="bob").messages) == 1


@pytest.mark.parametrize("bad", ["text", HumanMessage("one"), [HumanMessage("ok"), {"role": "user"}]])
def test_bad_input_is_refused_and_nothing_is_written(memory, bad):
    history = ThreadRecallChatMessageHistory(memory, "bad", resource_id="r")
    with pytest.raises(InvalidArgumentError):
        history.add_messages(bad)
    assert history.messages == []


def test_blank_ids_are_refused(memory):
    with pytest.raises(InvalidArgumentError):
        ThreadRecallChatMessageHistory(memory, " ", resource_id="r")
    with pytest.raises(InvalidArgumentError):
        ThreadRecallChatMessageHistory(memory, "t", resource_id="")


def test_docstring_examples():
    assert doctest.testmod(integration).failed == 0
