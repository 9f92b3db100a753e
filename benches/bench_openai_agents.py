"""Per-turn cost of ThreadRecallSession next to the Agents SDK's own SQLiteSession.

Run: ``pytest benches/bench_openai_agents.py --benchmark-only --benchmark-group-by=group``.

Two turns, each on a session already holding 20 turns (40 items) and growing by the same
fixed number of rounds for every backend:

- ``session``: what the Runner asks of a session in one turn without tools: ``get_items()``
  (the whole history) and ``add_items`` of the user input and the reply;
- ``runner``: one ``Runner.run`` turn with the SDK's ``ScriptedModel`` (a tool call, its
  result and the answer: four items stored).

Backends: threadrecall on a DuckDB file; ``SQLiteSession`` in memory (its default) and on a
file. Compare medians within a group.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, SQLiteSession, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from threadrecall import Memory
from threadrecall.integrations.openai_agents import ThreadRecallSession
from threadrecall.storage import DuckDBStorage

ROUNDS = 200
HISTORY = [item for i in range(20) for item in (
    {"role": "user", "content": f"Question {i}: what is the weather in city {i}?"},
    {"id": f"msg_{i}", "type": "message", "role": "assistant", "status": "completed",
     "content": [{"type": "output_text", "text": f"It is sunny in city {i}.", "annotations": []}]})]
BACKENDS = ["threadrecall-duckdb-file", "sqlite-memory", "sqlite-file"]


@pytest.fixture
def session(request, tmp_path):
    kind = request.param
    if kind == "threadrecall-duckdb-file":
        memory = Memory(storage=DuckDBStorage(tmp_path / "agents.duckdb"))
        made = ThreadRecallSession("bench", memory)
    else:
        memory = None
        made = SQLiteSession("bench", ":memory:" if kind == "sqlite-memory" else tmp_path / "agents.db")
    loop = asyncio.new_event_loop()
    loop.run_until_complete(made.add_items(HISTORY))
    yield made, loop
    loop.close()
    if memory is not None:
        memory.close()
    else:
        made.close()


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


@pytest.mark.benchmark(group="openai-agents: session turn")
@pytest.mark.parametrize("session", BACKENDS, indirect=True)
def test_session_turn(benchmark, session):
    store, loop = session
    counter = iter(range(10**9))

    async def turn():
        i = next(counter)
        history = await store.get_items()
        await store.add_items([{"role": "user", "content": f"New question {i}"},
                               {"role": "assistant", "content": f"New answer {i}"}])
        return history

    history = benchmark.pedantic(lambda: loop.run_until_complete(turn()), rounds=ROUNDS, warmup_rounds=5)
    assert len(history) == len(HISTORY) + 2 * (ROUNDS + 5 - 1)


@pytest.mark.benchmark(group="openai-agents: Runner turn with a tool call")
@pytest.mark.parametrize("session", BACKENDS, indirect=True)
def test_runner_turn(benchmark, session):
    store, loop = session
    model = ScriptedModel()
    agent = Agent(name="weather", model=model, tools=[get_weather])
    counter = iter(range(10**9))

    def turn():
        i = next(counter)
        model.extend([[function_call("get_weather", {"city": f"c{i}"}, call_id=f"call-{i}")],
                      [assistant_message(f"Sunny in c{i}.")]])
        return loop.run_until_complete(Runner.run(agent, f"Weather in c{i}?", session=store))

    result = benchmark.pedantic(turn, rounds=ROUNDS // 2, warmup_rounds=3)
    assert result.final_output.startswith("Sunny in c")
    assert len(loop.run_until_complete(store.get_items())) == len(HISTORY) + 4 * (ROUNDS // 2 + 3)
