"""ThreadRecallSession under the Agents SDK's own Runner and scripted model, and the behaviour
the SDK's session tests ask of every session, on a DuckDB file."""

from __future__ import annotations

import asyncio
import concurrent.futures
import doctest

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, function_tool
from agents.memory import Session, SessionSettings
from agents.testing import ScriptedModel, assistant_message, function_call
from threadrecall import Memory
from threadrecall.embedders import HashEmbedder
from threadrecall.errors import ConfigurationError, InvalidArgumentError, ResourceMismatchError
from threadrecall.integrations import openai_agents
from threadrecall.integrations.openai_agents import ThreadRecallSession
from threadrecall.storage import DuckDBStorage


@pytest.fixture
def db(tmp_path):
    return tmp_path / "agents.duckdb"


@pytest.fixture
def memory(db):
    memory = Memory(storage=DuckDBStorage(db))
    yield memory
    memory.close()


def run(coro):
    return asyncio.run(coro)


async def run_agent(method, agent, input_data, **kwargs):
    if method == "run":
        return await Runner.run(agent, input_data, **kwargs)
    if method == "run_sync":
        return await asyncio.to_thread(Runner.run_sync, agent, input_data, **kwargs)
    result = Runner.run_streamed(agent, input_data, **kwargs)
    async for _ in result.stream_events():
        pass
    return result


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


def test_it_satisfies_the_session_protocol(memory):
    assert isinstance(ThreadRecallSession("s", memory), Session)


@pytest.mark.parametrize("method", ["run", "run_sync", "run_streamed"])
def test_a_runner_run_with_tool_calls_keeps_the_whole_turn(memory, db, method):
    model = ScriptedModel([
        [function_call("get_weather", {"city": "Paris"}, call_id="call-1")],
        [assistant_message("It is sunny in Paris.")],
        [assistant_message("You asked about Paris.")],
    ])
    agent = Agent(name="weather", model=model, tools=[get_weather])
    session = ThreadRecallSession("chat-1", memory, resource_id="alice")

    async def conversation():
        first = await run_agent(method, agent, "Weather in Paris?", session=session)
        second = await run_agent(method, agent, "What did I ask?", session=session)
        return first, second

    first, second = run(conversation())
    assert first.final_output == "It is sunny in Paris."
    assert second.final_output == "You asked about Paris."
    assert model.remaining_steps == 0

    items = run(session.get_items())
    kinds = [item.get("type", "message") for item in items]
    assert kinds == ["message", "function_call", "function_call_output", "message", "message", "message"]
    assert items[0] == {"role": "user", "content": "Weather in Paris?"}
    assert items[1]["name"] == "get_weather" and items[1]["call_id"] == "call-1"
    assert items[2]["output"] == "Sunny in Paris"
    assert items[3]["content"][0]["text"] == "It is sunny in Paris."
    # the last model call saw the first turn, tool call and result included, before the new input
    assert model.last_call.input[:4] == items[:4]
    assert model.last_call.input[4] == {"role": "user", "content": "What did I ask?"}

    memory.close()
    reopened = Memory(storage=DuckDBStorage(db))
    try:
        assert run(ThreadRecallSession("chat-1", reopened, resource_id="alice").get_items()) == items
        # the tool call is a native tool-invocation part for everything else reading the thread
        stored = reopened.recall("chat-1", per_page=False).messages
        assert stored[1].content.parts[0]["tool_invocation"]["args"] == {"city": "Paris"}
    finally:
        reopened.close()


@pytest.mark.parametrize("method", ["run", "run_streamed"])
def test_sessions_keep_separate_histories(memory, method):
    model = ScriptedModel([[assistant_message("cats")], [assistant_message("dogs")],
                           [assistant_message("you like cats")]])
    agent = Agent(name="pets", model=model)
    one, two = ThreadRecallSession("s1", memory), ThreadRecallSession("s2", memory)

    async def conversation():
        await run_agent(method, agent, "I like cats", session=one)
        await run_agent(method, agent, "I like dogs", session=two)
        return await run_agent(method, agent, "What do I like?", session=one)

    assert run(conversation()).final_output == "you like cats"
    seen = [item.get("content") for item in model.last_call.input if item.get("role") == "user"]
    assert seen == ["I like cats", "What do I like?"]


def test_list_input_is_appended_to_the_history(memory):
    session = ThreadRecallSession("s", memory)
    history = [{"role": "user", "content": "Earlier message"}, {"role": "assistant", "content": "Saved reply"}]
    run(session.add_items(history))
    model = ScriptedModel([[assistant_message("ok")]])
    new = [{"role": "user", "content": "Test message"}]
    run(Runner.run(Agent(name="a", model=model), new, session=session))
    assert model.last_call.input == history + new


def test_session_input_callback_sees_the_stored_history(memory):
    session = ThreadRecallSession("s", memory)
    history = [{"role": "user", "content": "Hello there."}, {"role": "assistant", "content": "Hi."}]
    run(session.add_items(history))
    model = ScriptedModel([[assistant_message("I'm a model")]])
    new = [{"role": "user", "content": "What is your name?"}]
    only_user = RunConfig(session_input_callback=lambda old, fresh: [
        i for i in old if i["role"] == "user"] + fresh)
    run(Runner.run(Agent(name="a", model=model), new, session=session, run_config=only_user))
    assert model.last_call.input == [history[0], new[0]]


def test_run_config_session_settings_limit_the_history(memory):
    session = ThreadRecallSession("s", memory, session_settings=SessionSettings(limit=100))
    run(session.add_items([{"role": "user", "content": f"Turn {i}"} for i in range(10)]))
    model = ScriptedModel([[assistant_message("Got it")]])
    run(Runner.run(Agent(name="a", model=model), "New question", session=session,
                   run_config=RunConfig(session_settings=SessionSettings(limit=2))))
    assert [i["content"] for i in model.last_call.input] == ["Turn 8", "Turn 9", "New question"]


# ----------------------------------------------------------------------------- session behaviour

def test_add_get_and_clear(memory):
    session = ThreadRecallSession("direct", memory)
    items = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there!"}]
    run(session.add_items(items))
    assert run(session.get_items()) == items
    run(session.clear_session())
    assert run(session.get_items()) == []
    run(session.add_items(items[:1]))  # a cleared session takes new items
    assert run(session.get_items()) == items[:1]


def test_pop_item(memory):
    session = ThreadRecallSession("pop", memory)
    assert run(session.pop_item()) is None
    items = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi there!"},
             {"role": "user", "content": "How are you?"}]
    run(session.add_items(items))
    assert run(session.pop_item()) == items[2]
    assert run(session.get_items()) == items[:2]
    assert run(session.pop_item()) == items[1]
    assert run(session.pop_item()) == items[0]
    assert run(session.pop_item()) is None
    assert run(session.get_items()) == []


def test_pop_only_touches_its_own_session(memory):
    one, two = ThreadRecallSession("s1", memory), ThreadRecallSession("s2", memory)
    run(one.add_items([{"role": "user", "content": "Session 1 message"}]))
    run(two.add_items([{"role": "user", "content": "Session 2 message 1"},
                       {"role": "user", "content": "Session 2 message 2"}]))
    assert run(two.pop_item())["content"] == "Session 2 message 2"
    assert [i["content"] for i in run(one.get_items())] == ["Session 1 message"]
    assert [i["content"] for i in run(two.get_items())] == ["Session 2 message 1"]


def test_concurrent_pops_never_return_one_item_twice(memory):
    session = ThreadRecallSession("race", memory)
    run(session.add_items([{"role": "user", "content": f"m{i}"} for i in range(40)]))

    def pop():
        return asyncio.run(session.pop_item())

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        popped = list(pool.map(lambda _: pop(), range(50)))
    contents = [p["content"] for p in popped if p is not None]
    assert sorted(contents) == sorted(f"m{i}" for i in range(40))
    assert popped.count(None) == 10
    assert run(session.get_items()) == []


def test_get_items_with_limit(memory):
    session = ThreadRecallSession("count", memory)
    items = [{"role": r, "content": f"{w} {i}"} for i in (1, 2, 3)
             for r, w in (("user", "Message"), ("assistant", "Response"))]
    run(session.add_items(items))
    assert run(session.get_items()) == items
    assert run(session.get_items(limit=2)) == items[-2:]
    assert run(session.get_items(limit=4)) == items[-4:]
    assert run(session.get_items(limit=10)) == items
    assert run(session.get_items(limit=0)) == []


def test_session_settings(memory):
    assert ThreadRecallSession("s", memory).session_settings.limit is None
    session = ThreadRecallSession("s", memory, session_settings=SessionSettings(limit=3))
    run(session.add_items([{"role": "user", "content": f"Message {i}"} for i in range(5)]))
    assert [i["content"] for i in run(session.get_items())] == ["Message 2", "Message 3", "Message 4"]
    assert [i["content"] for i in run(session.get_items(limit=1))] == ["Message 4"]


def test_unicode_and_sql_looking_content(memory):
    session = ThreadRecallSession("chars", memory)
    items = [{"role": "user", "content": c} for c in (
        "こんにちは", "😊👍", "Привет", "O'Reilly", "DROP TABLE sessions;",
        '"SELECT * FROM users WHERE name = "admin";"', "Robert'); DROP TABLE students;--")]
    run(session.add_items(items))
    assert run(session.get_items()) == items


def test_concurrent_writers_lose_nothing(memory):
    session = ThreadRecallSession("concurrent", memory)

    def add(i):
        asyncio.run(session.add_items([{"role": "user", "content": f"Message {i}"}]))

    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
        list(pool.map(add, range(10)))
    assert {i["content"] for i in run(session.get_items())} == {f"Message {i}" for i in range(10)}


# ----------------------------------------------------------------------------- lossless items

EVERY_KIND = [
    {"role": "user", "content": "plain text"},
    {"role": "system", "content": "You are terse."},
    {"role": "developer", "content": "Answer in French."},
    {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "What is in this picture?"},
        {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "high"},
        {"type": "input_image", "file_id": "file-9", "detail": "auto"},
        {"type": "input_file", "filename": "notes.pdf", "file_data": "data:application/pdf;base64,JVBERi0="},
        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
    ]},
    {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed", "content": [
        {"type": "output_text", "text": "A cat.", "annotations": [], "logprobs": []},
        {"type": "refusal", "refusal": "I won't name the cat."},
    ]},
    {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "lookup",
     "arguments": '{"q":  "x", "n": 2}', "status": "completed"},
    {"type": "function_call", "call_id": "c2", "name": "raw", "arguments": "not json"},
    {"type": "function_call_output", "call_id": "c1", "output": "found"},
    {"type": "function_call_output", "call_id": "c2", "output": [
        {"type": "input_text", "text": "two parts"}, {"type": "input_image", "image_url": "https://x/y.png"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Check the tool."}],
     "encrypted_content": "gAAAA"},
    {"type": "reasoning", "id": "rs_2", "summary": []},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
    {"type": "computer_call_output", "call_id": "cc1",
     "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AA=="}},
    {"type": "item_reference", "id": "msg_0"},
]


def test_every_kind_of_item_comes_back_exactly(memory, db):
    session = ThreadRecallSession("kinds", memory)
    run(session.add_items(EVERY_KIND))
    assert run(session.get_items()) == EVERY_KIND
    memory.close()
    reopened = Memory(storage=DuckDBStorage(db))
    try:
        assert run(ThreadRecallSession("kinds", reopened).get_items()) == EVERY_KIND
        roles = [m.role for m in reopened.recall("kinds", per_page=False).messages]
        assert roles[:3] == ["user", "system", "system"]
        assert roles[7] == "tool" and roles[12] == "tool"
    finally:
        reopened.close()


def test_items_are_stored_as_native_parts(memory):
    session = ThreadRecallSession("native", memory)
    run(session.add_items(EVERY_KIND[3:6] + EVERY_KIND[9:10]))
    user, assistant, call, reasoning = memory.recall("native", per_page=False).messages
    assert user.text == "What is in this picture?"
    assert [p["type"] for p in user.content.parts] == ["text", "file", "file", "file", "data-openai-agents"]
    assert user.content.parts[1]["url"] == "data:image/png;base64,iVBORw0KGgo="
    assert user.content.parts[3]["filename"] == "notes.pdf"
    assert assistant.text == "A cat. I won't name the cat."
    assert call.content.parts[0]["tool_invocation"] == {
        "state": "call", "tool_call_id": "c1", "tool_name": "lookup", "args": {"q": "x", "n": 2}}
    assert reasoning.content.parts[0]["type"] == "reasoning"


def test_messages_saved_by_other_means_read_as_items(memory):
    memory.create_thread("r", thread_id="other")
    memory.save_messages([
        {"thread_id": "other", "role": "user", "content": "typed elsewhere"},
        {"thread_id": "other", "role": "assistant", "content": {"parts": [{"type": "tool-invocation",
         "tool_invocation": {"state": "call", "tool_call_id": "t1", "tool_name": "f", "args": {"a": 1}}}]}},
        {"thread_id": "other", "role": "tool", "content": {"parts": [{"type": "tool-invocation",
         "tool_invocation": {"state": "result", "tool_call_id": "t1", "tool_name": "f", "result": {"ok": True}}}]}},
    ])
    assert run(ThreadRecallSession("other", memory).get_items()) == [
        {"role": "user", "content": "typed elsewhere"},
        {"type": "function_call", "call_id": "t1", "name": "f", "arguments": '{"a": 1}'},
        {"type": "function_call_output", "call_id": "t1", "output": '{"ok": true}'},
    ]


# ----------------------------------------------------------------------------- recall and errors

def test_related_items_finds_similar_items_across_the_resource(db):
    memory = Memory(storage=DuckDBStorage(db), embedder=HashEmbedder(), options={"semantic_recall": True})
    try:
        trip = ThreadRecallSession("trip", memory, resource_id="alice")
        chat = ThreadRecallSession("chat", memory, resource_id="alice")
        run(trip.add_items([{"role": "user", "content": "my passport expires in June"},
                            {"role": "assistant", "content": "renew it before you travel"}]))
        run(chat.add_items([{"role": "user", "content": "book a table for two in Lisbon"}]))
        found = run(chat.related_items("passport expires", limit=2))
        assert found[0] == {"role": "user", "content": "my passport expires in June"}
        assert len(found) == 2
        assert run(chat.related_items("passport expires", scope="thread", limit=1)) == [
            {"role": "user", "content": "book a table for two in Lisbon"}]
        with pytest.raises(InvalidArgumentError):
            run(chat.related_items("", limit=2))
        with pytest.raises(InvalidArgumentError):
            run(chat.related_items("x", limit=0))
    finally:
        memory.close()


def test_related_items_without_semantic_recall_says_so(memory):
    with pytest.raises(ConfigurationError, match="semantic recall"):
        run(ThreadRecallSession("s", memory).related_items("anything"))


def test_a_resource_cannot_read_another_resources_session(memory):
    run(ThreadRecallSession("private", memory, resource_id="bob").add_items([{"role": "user", "content": "x"}]))
    intruder = ThreadRecallSession("private", memory, resource_id="mallory")
    for call in (intruder.get_items(), intruder.pop_item(), intruder.clear_session()):
        with pytest.raises(ResourceMismatchError):
            run(call)
    assert len(run(ThreadRecallSession("private", memory, resource_id="bob").get_items())) == 1


@pytest.mark.parametrize("bad", ["text", {"role": "user"}, [1], [{"role": "user", "content": "ok"}, "no"]])
def test_bad_items_are_refused_and_nothing_is_written(memory, bad):
    session = ThreadRecallSession("bad", memory)
    with pytest.raises(InvalidArgumentError):
        run(session.add_items(bad))
    assert run(session.get_items()) == []


def test_blank_session_id_is_refused(memory):
    with pytest.raises(InvalidArgumentError):
        ThreadRecallSession(" ", memory)


def test_docstring_examples():
    assert doctest.testmod(openai_agents).failed == 0
