"""LangGraph on threadrecall next to LangGraph's own in-process defaults.

Run: ``pytest benches/bench_langgraph.py --benchmark-only --benchmark-group-by=group``.
Each group times one operation with ``InMemorySaver`` / ``InMemoryStore`` and with
``ThreadRecallSaver`` / ``ThreadRecallStore`` on a DuckDB file, side by side in one run; the
ratio of their medians is the cost of durability. The graph runs use LangGraph's default
durability (every checkpoint written while the next step runs) unless the name says ``exit``
(written once when the run ends).
"""

from __future__ import annotations

import itertools
import operator
from typing import Annotated, TypedDict

import pytest

pytest.importorskip("langgraph")

from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.store.base import PutOp  # noqa: E402
from langgraph.store.memory import InMemoryStore  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

from threadrecall import Memory  # noqa: E402
from threadrecall.embedders import HashEmbedder  # noqa: E402
from threadrecall.integrations.langgraph import ThreadRecallSaver, ThreadRecallStore  # noqa: E402
from threadrecall.storage import DuckDBStorage  # noqa: E402

EMBEDDER = HashEmbedder(dim=64)
ITEMS = 2_000
TOPICS = ["billing", "travel", "health", "cooking", "sport"]


def embed(texts):
    return EMBEDDER.embed(list(texts)).tolist()


@pytest.fixture
def memory(tmp_path):
    with Memory(storage=DuckDBStorage(tmp_path / "langgraph.duckdb")) as memory:
        yield memory


@pytest.fixture(params=["InMemorySaver", "ThreadRecallSaver"])
def saver(request, memory):
    return InMemorySaver() if request.param == "InMemorySaver" else ThreadRecallSaver(memory)


class Steps(TypedDict):
    steps: Annotated[list[str], operator.add]


def review_graph(saver):
    builder = StateGraph(Steps)
    builder.add_node("draft", lambda s: {"steps": ["drafted"]})
    builder.add_node("review", lambda s: {"steps": [f"reviewed:{interrupt('approve?')}"]})
    builder.add_node("publish", lambda s: {"steps": ["published"]})
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("review", "publish")
    builder.add_edge("publish", END)
    return builder.compile(checkpointer=saver)


class Chat(TypedDict):
    turns: Annotated[list[str], operator.add]


def chat_graph(saver):
    builder = StateGraph(Chat)
    builder.add_node("reply", lambda s: {"turns": [f"reply {len(s['turns'])}"]})
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("durability", ["async", "exit"])
def test_interrupted_and_resumed_run(benchmark, saver, durability):
    benchmark.group = f"interrupted and resumed run ({durability})"
    graph = review_graph(saver)
    ids = itertools.count()

    def run():
        config = {"configurable": {"thread_id": f"run-{next(ids)}"}}
        graph.invoke({"steps": []}, config, durability=durability)
        return graph.invoke(Command(resume="yes"), config, durability=durability)

    assert benchmark.pedantic(run, rounds=40, warmup_rounds=3)["steps"][-1] == "published"


def test_chat_turn(benchmark, saver):
    """One turn of a long conversation: the graph loads the thread's state, appends, saves."""
    benchmark.group = "chat turn (thread of 200 turns)"
    graph = chat_graph(saver)
    config = {"configurable": {"thread_id": "chat"}}
    for i in range(200):
        graph.invoke({"turns": [f"user {i}"]}, config)
    turns = itertools.count()
    benchmark.pedantic(lambda: graph.invoke({"turns": [f"user {next(turns)}"]}, config),
                       rounds=40, warmup_rounds=3)


def test_one_commit_floor(benchmark, memory):
    """What a durable write costs by itself here: one message saved in its own transaction.
    A checkpoint is one such write and a task's writes another, so a graph step costs about
    two of these on top of LangGraph's own work."""
    benchmark.group = "floor: one save_messages of one message"
    memory.create_thread("r", thread_id="floor")
    n = itertools.count()
    benchmark.pedantic(lambda: memory.save_messages([{"thread_id": "floor", "role": "user",
                                                      "content": f"m{next(n)}"}]),
                       rounds=60, warmup_rounds=3)


@pytest.fixture(params=["InMemoryStore", "ThreadRecallStore"])
def store(request, memory):
    index = {"dims": 64, "embed": embed, "fields": ["text"]}
    if request.param == "InMemoryStore":
        yield InMemoryStore(index=index)
        return
    store = ThreadRecallStore(memory, index=index)
    yield store
    store.close()


def fill(store):
    store.batch([PutOp(("memories", f"user-{i % 20}"), f"m{i}",
                       {"text": f"note {i} about {TOPICS[i % 5]} and plans", "topic": TOPICS[i % 5],
                        "n": i}) for i in range(ITEMS)])


def test_store_put(benchmark, store):
    benchmark.group = "store put (one item, embedded)"
    keys = itertools.count()
    benchmark.pedantic(lambda: store.put(("memories", "user-1"), f"k{next(keys)}",
                                         {"text": "the user prefers window seats", "topic": "travel"}),
                       rounds=60, warmup_rounds=3)


def test_store_batch_of_puts(benchmark, store):
    benchmark.group = f"store batch of {ITEMS} puts"
    benchmark.pedantic(fill, args=(store,), rounds=3, warmup_rounds=0)


def test_store_get(benchmark, store):
    benchmark.group = f"store get ({ITEMS} items)"
    fill(store)
    keys = itertools.cycle(range(ITEMS))
    benchmark(lambda: store.get(("memories", f"user-{(k := next(keys)) % 20}"), f"m{k}"))


def test_store_filtered_search(benchmark, store):
    benchmark.group = f"store search: query and filter ({ITEMS} items)"
    fill(store)
    hits = benchmark(lambda: store.search(("memories",), query="plans about travel",
                                          filter={"topic": "travel", "n": {"$gte": 1000}}, limit=10))
    assert len(hits) == 10 and all(h.value["topic"] == "travel" and h.value["n"] >= 1000 for h in hits)
