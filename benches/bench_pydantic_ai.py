"""Pydantic AI conversations on threadrecall next to Pydantic AI's in-memory store.

Run: ``pytest benches/bench_pydantic_ai.py --benchmark-only --benchmark-group-by=group``.
A turn is what an app does around each run: load the conversation, run the agent (a scripted
``TestModel``, so the model costs next to nothing), save the result. Each group times the same
turn with ``InMemoryConversationStore`` and with ``ThreadRecallConversationStore`` on a DuckDB
file, side by side in one run.
"""

from __future__ import annotations

import asyncio
import itertools

import pytest

pytest.importorskip("pydantic_ai.conversation_store")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.conversation import Conversation  # noqa: E402
from pydantic_ai.conversation_store import InMemoryConversationStore  # noqa: E402
from pydantic_ai.models.test import TestModel  # noqa: E402
from pydantic_ai.usage import UsageLimits  # noqa: E402

from threadrecall import Memory  # noqa: E402
from threadrecall.integrations.pydantic_ai import ThreadRecallConversationStore  # noqa: E402
from threadrecall.storage import DuckDBStorage  # noqa: E402

HISTORY = 50  # turns already in the conversation when timing starts
UNLIMITED = UsageLimits(request_limit=None)  # usage adds up over the whole conversation


@pytest.fixture(params=["InMemoryConversationStore", "ThreadRecallConversationStore"])
def store(request, tmp_path):
    if request.param == "InMemoryConversationStore":
        yield InMemoryConversationStore()
        return
    with Memory(storage=DuckDBStorage(tmp_path / "pydantic-ai.duckdb")) as memory:
        yield ThreadRecallConversationStore(memory)


async def turn(store, agent, conversation_id, prompt):
    conversation = await store.load(conversation_id) or Conversation(conversation_id=conversation_id)
    result = await agent.run(prompt, conversation=conversation, usage_limits=UNLIMITED)
    await store.save(result)


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def test_turn(benchmark, store, loop):
    benchmark.group = f"turn: load, run, save (conversation of {HISTORY} turns)"
    agent = Agent(TestModel(custom_output_text="Noted."))
    for i in range(HISTORY):
        loop.run_until_complete(turn(store, agent, "c1", f"message {i}"))
    prompts = itertools.count()
    benchmark.pedantic(lambda: loop.run_until_complete(turn(store, agent, "c1", f"more {next(prompts)}")),
                       rounds=40, warmup_rounds=3)


def test_first_turn(benchmark, store, loop):
    benchmark.group = "first turn of a new conversation"
    agent = Agent(TestModel(custom_output_text="Hello."))
    ids = itertools.count()
    benchmark.pedantic(lambda: loop.run_until_complete(turn(store, agent, f"new-{next(ids)}", "hi")),
                       rounds=40, warmup_rounds=3)


def test_load(benchmark, store, loop):
    benchmark.group = f"load a conversation of {HISTORY} turns"
    agent = Agent(TestModel(custom_output_text="Noted."))
    for i in range(HISTORY):
        loop.run_until_complete(turn(store, agent, "c1", f"message {i}"))
    loaded = benchmark(lambda: loop.run_until_complete(store.load("c1")))
    assert len(loaded.messages) == 2 * HISTORY
