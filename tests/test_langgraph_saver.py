"""ThreadRecallSaver: LangGraph's checkpointer conformance suite and interrupted graph runs,
on DuckDB files."""

from __future__ import annotations

import asyncio
import operator
import os
import signal
import subprocess
import sys
import textwrap
from typing import Annotated, TypedDict

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

from threadrecall import Memory  # noqa: E402
from threadrecall.integrations.langgraph import ThreadRecallSaver  # noqa: E402
from threadrecall.storage import DuckDBStorage  # noqa: E402


@pytest.mark.parametrize("backend", ["duckdb", "postgres"])
def test_every_base_capability_of_the_conformance_suite_passes(tmp_path, request, backend):
    made = []

    @checkpointer_test(name="ThreadRecallSaver")
    async def saver():
        if backend == "duckdb":
            memory = Memory(storage=DuckDBStorage(tmp_path / f"cp{len(made)}.duckdb"))
        else:  # a schema of its own for each saver the suite makes: each expects an empty store
            from threadrecall.storage import PostgresStorage

            dsn, schema = request.getfixturevalue("pg_dsn"), f"{request.getfixturevalue('pg_schema')}_{len(made)}"
            memory = Memory(storage=PostgresStorage(dsn, schema=schema))
        made.append(memory)
        yield ThreadRecallSaver(memory)
        memory.close()
        if backend == "postgres":
            drop_schema(dsn, schema)

    report = asyncio.run(validate(saver))
    for capability in BASE_CAPABILITIES:
        result = report.results[capability.value]
        assert result.detected and result.passed, (capability.value, result.failures)
        assert result.tests_passed > 0 and result.tests_failed == 0
    assert len(made) >= len(BASE_CAPABILITIES)


def drop_schema(dsn, name):
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("DROP SCHEMA {} CASCADE").format(psycopg.sql.Identifier(name)))


class State(TypedDict):
    steps: Annotated[list[str], operator.add]


def approval_graph(saver):
    def draft(state):
        return {"steps": ["drafted"]}

    def review(state):
        answer = interrupt({"question": "approve?", "so_far": state["steps"]})
        return {"steps": [f"reviewed:{answer}"]}

    def publish(state):
        return {"steps": ["published"]}

    builder = StateGraph(State)
    builder.add_node("draft", draft)
    builder.add_node("review", review)
    builder.add_node("publish", publish)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("review", "publish")
    builder.add_edge("publish", END)
    return builder.compile(checkpointer=saver)


def test_an_interrupted_run_resumes_from_the_file_in_a_new_process_state(tmp_path):
    path = tmp_path / "graph.duckdb"
    config = {"configurable": {"thread_id": "review-1"}}
    with Memory(storage=DuckDBStorage(path)) as memory:
        graph = approval_graph(ThreadRecallSaver(memory))
        first = graph.invoke({"steps": []}, config)
        assert first["steps"] == ["drafted"]
        (pending,) = first["__interrupt__"]
        assert pending.value == {"question": "approve?", "so_far": ["drafted"]}
        assert graph.get_state(config).next == ("review",)
    with Memory(storage=DuckDBStorage(path)) as memory:  # reopened: nothing kept in memory
        graph = approval_graph(ThreadRecallSaver(memory))
        assert graph.get_state(config).next == ("review",)
        done = graph.invoke(Command(resume="yes"), config)
        assert done["steps"] == ["drafted", "reviewed:yes", "published"]
        history = list(graph.get_state_history(config))
        assert history[0].values["steps"] == done["steps"] and history[0].next == ()
        assert len(history) >= 4


def test_an_interrupted_async_run_resumes(tmp_path):
    config = {"configurable": {"thread_id": "review-2"}}

    async def run():
        with Memory(storage=DuckDBStorage(tmp_path / "async.duckdb")) as memory:
            graph = approval_graph(ThreadRecallSaver(memory))
            first = await graph.ainvoke({"steps": []}, config)
            assert "__interrupt__" in first
            done = await graph.ainvoke(Command(resume="no"), config)
            return done["steps"]

    assert asyncio.run(run()) == ["drafted", "reviewed:no", "published"]


def test_threads_and_namespaces_stay_apart_and_delete_thread_removes_all(tmp_path):
    with Memory(storage=DuckDBStorage(tmp_path / "m.duckdb")) as memory:
        saver = ThreadRecallSaver(memory)
        graph = approval_graph(saver)
        for tid in ("a", "b"):
            graph.invoke({"steps": []}, {"configurable": {"thread_id": tid}})
        a = list(saver.list({"configurable": {"thread_id": "a"}}))
        assert a and all(t.config["configurable"]["thread_id"] == "a" for t in a)
        saver.delete_thread("a")
        assert saver.get_tuple({"configurable": {"thread_id": "a"}}) is None
        assert list(saver.list({"configurable": {"thread_id": "a"}})) == []
        assert saver.get_tuple({"configurable": {"thread_id": "b"}}) is not None
        # The checkpoints are messages of their own resource, apart from conversations.
        assert {t.resource_id for t in memory.list_threads(per_page=False).threads} == {
            "langgraph-checkpoints"}


def test_the_latest_checkpoint_is_the_greatest_id_even_when_put_out_of_order(tmp_path):
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    with Memory(storage=DuckDBStorage(tmp_path / "m.duckdb")) as memory:
        saver = ThreadRecallSaver(memory)
        older, newer = str(uuid6(clock_seq=1)), str(uuid6(clock_seq=2))
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        for cid in (newer, older):
            saver.put(config, {**empty_checkpoint(), "id": cid}, {"step": 0}, {})
        assert saver.get_tuple(config).checkpoint["id"] == newer
        assert [t.checkpoint["id"] for t in saver.list(config)] == [newer, older]


def test_a_config_without_thread_id_is_refused(tmp_path):
    from threadrecall.errors import InvalidArgumentError

    with Memory(storage=DuckDBStorage(tmp_path / "m.duckdb")) as memory:
        with pytest.raises(InvalidArgumentError):
            ThreadRecallSaver(memory).get_tuple({"configurable": {}})


class Topic(TypedDict):
    topic: str  # set by the input only: later checkpoints point to the value the first holds
    steps: Annotated[list[str], operator.add]


def topic_graph(saver):
    builder = StateGraph(Topic)
    builder.add_node("draft", lambda state: {"steps": [f"drafted:{state['topic']}"]})
    builder.add_node("review", lambda state: {"steps": [f"reviewed:{interrupt('approve?')}"]})
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("review", END)
    return builder.compile(checkpointer=saver)


def test_a_run_stores_one_message_per_checkpoint_and_per_write(tmp_path):
    with Memory(storage=DuckDBStorage(tmp_path / "m.duckdb")) as memory:
        graph = topic_graph(ThreadRecallSaver(memory))
        config = {"configurable": {"thread_id": "review-1"}}
        graph.invoke({"topic": "dogs", "steps": []}, config)
        done = graph.invoke(Command(resume="yes"), config)
        assert done == {"topic": "dogs", "steps": ["drafted:dogs", "reviewed:yes"]}
        (thread,) = memory.list_threads(resource_id="langgraph-checkpoints").threads
        kinds = [m.metadata["kind"] for m in memory.recall(thread.id, per_page=False).messages]
        checkpoints = [t.checkpoint["id"] for t in ThreadRecallSaver(memory).list(config)]
        assert kinds.count("checkpoint") == len(checkpoints) == 4 and set(kinds) == {"checkpoint", "write"}
        # Every checkpoint reads back the values its channels had, wherever they are held:
        # the same history as LangGraph's own saver gives.
        reference = topic_graph(InMemorySaver())
        reference.invoke({"topic": "dogs", "steps": []}, config)
        reference.invoke(Command(resume="yes"), config)
        history = [(s.values, s.next) for s in graph.get_state_history(config)]
        assert history == [(s.values, s.next) for s in reference.get_state_history(config)]
        assert [values.get("topic") for values, _ in history] == ["dogs", "dogs", "dogs", None]


def test_a_checkpoint_of_the_earlier_format_raises_a_clear_error(tmp_path):
    from threadrecall.errors import StorageError

    with Memory(storage=DuckDBStorage(tmp_path / "m.duckdb")) as memory:
        saver = ThreadRecallSaver(memory)
        graph = approval_graph(saver)
        config = {"configurable": {"thread_id": "review-1"}}
        graph.invoke({"steps": []}, config)
        latest = saver.get_tuple(config).config["configurable"]["checkpoint_id"]
        (old,) = [m for m in memory.recall(next(iter(memory.list_threads().threads)).id, per_page=False).messages
                  if m.metadata.get("checkpoint_id") == latest and m.metadata["kind"] == "checkpoint"]
        memory.update_messages([{"id": old.id, "metadata": {"holders": None}}])
        with pytest.raises(StorageError, match="earlier ThreadRecallSaver"):
            saver.get_tuple(config)


RUNNER = textwrap.dedent(
    """
    import operator, sys, threading
    from typing import Annotated, TypedDict
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import Command, interrupt
    from threadrecall import Memory
    from threadrecall.integrations.langgraph import ThreadRecallSaver
    from threadrecall.storage import DuckDBStorage

    class State(TypedDict):
        steps: Annotated[list[str], operator.add]

    builder = StateGraph(State)
    builder.add_node("draft", lambda s: {"steps": ["drafted"]})
    builder.add_node("review", lambda s: {"steps": [f"reviewed:{interrupt('approve?')}"]})
    builder.add_node("publish", lambda s: {"steps": ["published"]})
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("review", "publish")
    builder.add_edge("publish", END)
    graph = builder.compile(checkpointer=ThreadRecallSaver(Memory(storage=DuckDBStorage(sys.argv[1]))))
    out = threading.Lock()

    def runs(w):
        for n in range(10**9):
            config = {"configurable": {"thread_id": f"w{w}-{n}"}}
            graph.invoke({"steps": []}, config)
            with out:
                print(w, n, "interrupted", flush=True)
            graph.invoke(Command(resume="yes"), config)
            with out:
                print(w, n, "done", flush=True)

    for w in range(3):
        threading.Thread(target=runs, args=(w,), daemon=True).start()
    threading.Event().wait()
    """
)


def test_sigkill_loses_no_checkpoint_a_returned_invoke_wrote(tmp_path):
    """Three graphs run at once (so their writes share commits); once an invoke has returned,
    its checkpoints survive a SIGKILL of the process."""
    path = tmp_path / "crash.duckdb"
    child = subprocess.Popen([sys.executable, "-c", RUNNER, str(path)], stdout=subprocess.PIPE, text=True)
    acked: dict[tuple[int, int], str] = {}
    while sum(state == "done" for state in acked.values()) < 15:
        line = child.stdout.readline()
        assert line, "the runner died on its own"
        w, n, state = line.split()
        acked[(int(w), int(n))] = state
    os.kill(child.pid, signal.SIGKILL)
    child.wait()

    with Memory(storage=DuckDBStorage(path)) as memory:
        graph = approval_graph(ThreadRecallSaver(memory))
        for (w, n), state in acked.items():
            snapshot = graph.get_state({"configurable": {"thread_id": f"w{w}-{n}"}})
            if state == "done":
                assert snapshot.values["steps"] == ["drafted", "reviewed:yes", "published"]
                assert snapshot.next == ()
            else:
                assert snapshot.values["steps"][:1] == ["drafted"]
                assert snapshot.next in (("review",), ("publish",), ())  # a resume may have begun
