"""Per-turn cost of ThreadRecallChatMessageHistory next to LangChain's InMemoryChatMessageHistory.

Run: ``pytest benches/bench_langchain.py --benchmark-only --benchmark-group-by=group``.

Two turns, each on a history already holding 20 turns (40 messages) and growing by the same
fixed number of rounds for every backend:

- ``history``: what ``RunnableWithMessageHistory`` asks of a history in one turn: read every
  message, then add the input and the reply;
- ``runnable``: one ``RunnableWithMessageHistory.invoke`` through a prompt and LangChain's
  ``GenericFakeChatModel``.

Backends: threadrecall on a DuckDB file; ``InMemoryChatMessageHistory`` (LangChain's own).
"""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("langchain_core")

from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory
from threadrecall import Memory
from threadrecall.integrations.langchain import ThreadRecallChatMessageHistory
from threadrecall.storage import DuckDBStorage

ROUNDS = 200
HISTORY = [m for i in range(20) for m in (
    HumanMessage(f"Question {i}: what is the weather in city {i}?"),
    AIMessage(f"It is sunny in city {i}.", id=f"ai-{i}", response_metadata={"model_name": "fake"}))]
BACKENDS = ["threadrecall-duckdb-file", "in-memory"]


@pytest.fixture
def history(request, tmp_path):
    if request.param == "in-memory":
        made = InMemoryChatMessageHistory()
        made.add_messages(HISTORY)
        yield made
        return
    memory = Memory(storage=DuckDBStorage(tmp_path / "langchain.duckdb"))
    made = ThreadRecallChatMessageHistory(memory, "bench", resource_id="bench")
    made.add_messages(HISTORY)
    yield made
    memory.close()


@pytest.mark.benchmark(group="langchain: history turn")
@pytest.mark.parametrize("history", BACKENDS, indirect=True)
def test_history_turn(benchmark, history):
    counter = itertools.count()

    def turn():
        i = next(counter)
        seen = history.messages
        history.add_messages([HumanMessage(f"New question {i}"), AIMessage(f"New answer {i}")])
        return seen

    benchmark.pedantic(turn, rounds=ROUNDS, warmup_rounds=5)
    assert len(history.messages) == len(HISTORY) + 2 * (ROUNDS + 5)


@pytest.mark.benchmark(group="langchain: RunnableWithMessageHistory turn")
@pytest.mark.parametrize("history", BACKENDS, indirect=True)
def test_runnable_turn(benchmark, history):
    model = GenericFakeChatModel(messages=(AIMessage(f"Answer {i}") for i in itertools.count()))
    prompt = ChatPromptTemplate.from_messages([("system", "You are helpful."), MessagesPlaceholder("history"),
                                               ("human", "{question}")])
    chain = RunnableWithMessageHistory(prompt | model, lambda _: history,
                                       input_messages_key="question", history_messages_key="history")
    counter = itertools.count()
    config = {"configurable": {"session_id": "bench"}}

    reply = benchmark.pedantic(lambda: chain.invoke({"question": f"Q{next(counter)}"}, config),
                               rounds=ROUNDS, warmup_rounds=5)
    assert reply.content.startswith("Answer")
    assert len(history.messages) == len(HISTORY) + 2 * (ROUNDS + 5)
