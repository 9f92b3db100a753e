"""One turn of each framework integration next to the framework's own default backend,
interleaved: every round runs one turn on each backend, in alternating order, so a change of
load on a shared machine reaches both sides alike.

Run: ``python benches/compare_integrations.py [--rounds 60] [--only langgraph,llama-index]
[--breakdown]``.

For each framework it prints the median, best (minimum) and p90 time of a turn per backend,
the ratio of each to the framework default's, and how many DuckDB transactions threadrecall
committed per turn; and the median CPU time of a turn (the process's, all its threads), which
waiting for the disk or for a core taken by another job does not count, so on a shared machine
it tells the work a backend does apart from the load it meets. The same run measures the durable-write floor on the same disk: one
``save_messages`` of one message, a bare DuckDB insert in its own transaction, the same insert
into an in-memory database (the statement without the disk), and one ``fdatasync`` of a small
append, so ``commits x floor`` can be set beside each default's turn; and the same row through
DuckDB's appender in auto-commit (the form the storage's own inserts of rows take).
threadrecall is on a DuckDB file in a temporary directory throughout.

``--breakdown`` then runs as many more turns of threadrecall alone, timing (CPU of the calling
thread, so LangGraph's background writes count too) each call the framework makes into the
adapter, and inside them the journal's append with its ``fdatasync`` and the journal's
application to DuckDB, per turn (a grouped write counts in the call of the caller whose
thread committed its group); the timers add their own cost, so these turns are not the table's.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

from threadrecall import Memory
from threadrecall.storage import DuckDBStorage
from threadrecall.storage.duckdb import database, journal

Turn = Callable[[], Any]


class Commits:
    """Counts the DuckDB transactions every ``Database`` commits (a transaction that ran no
    statement commits nothing; one whose only statement was deferred commits it alone)."""

    count = 0
    journalled = 0  # of them, commits made by an append to the journal (none before it existed)

    @classmethod
    def install(cls) -> None:
        finish = database._Writer.finish

        def counted(self: database._Writer) -> None:
            if self.begun or self.deferred:
                cls.count += 1
            finish(self)

        database._Writer.finish = counted  # type: ignore[method-assign]
        append = getattr(database.Database, "_journal_append", None)
        if append is not None:
            def journalled(self: database.Database, rows: Any) -> bool:
                done = append(self, rows)
                cls.journalled += done
                return done

            database.Database._journal_append = journalled  # type: ignore[method-assign]


class Breakdown:
    """CPU time (of the calling thread) and calls per label, of methods wrapped in place."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._undo: list[tuple[type, str, Any]] = []

    def wrap(self, cls: type, name: str, label: str) -> None:
        method = cls.__dict__[name]
        cpu, calls = self.cpu, self.calls
        cpu.setdefault(label, 0.0)
        calls.setdefault(label, 0)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return method(*args, **kwargs)
            finally:
                cpu[label] += time.thread_time() - start
                calls[label] += 1

        setattr(cls, name, timed)
        self._undo.append((cls, name, method))

    def undo(self) -> None:
        for cls, name, method in reversed(self._undo):
            setattr(cls, name, method)
        self._undo.clear()


# The adapter calls each framework makes on a turn (sync ones: what runs in the thread timed).
_SAVER_CALLS = ("langgraph", "ThreadRecallSaver", ("get_tuple", "put", "put_writes"))
ADAPTER_CALLS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "langgraph": _SAVER_CALLS,
    "langgraph-exit": _SAVER_CALLS,
    "llama-index": ("llama_index", "ThreadRecallChatStore", ("get_messages", "add_message")),
    "llama-index-history": ("llama_index", "ThreadRecallChatStore", ("set_messages", "get_messages", "add_message")),
    "langchain": ("langchain", "ThreadRecallChatMessageHistory", ("add_messages",)),
}


def breakdown(framework: str, turn: Turn, rounds: int) -> list[str]:
    """Per-turn calls and CPU of the adapter's calls and of the journal inside them."""
    import importlib

    timers = Breakdown()
    if framework in ADAPTER_CALLS:
        module, name, methods = ADAPTER_CALLS[framework]
        cls = getattr(importlib.import_module(f"threadrecall.integrations.{module}"), name)
        for method in methods:
            timers.wrap(cls, method, f"{name}.{method}")
    timers.wrap(journal.Journal, "append", "of which: journal append + fdatasync")
    timers.wrap(database.Database, "settle", "of which: journal applied to DuckDB")
    try:
        for _ in range(rounds):
            turn()
    finally:
        timers.undo()
    return [f"| {framework} | {label} | {timers.calls[label] / rounds:.2f} calls/turn "
            f"| {timers.cpu[label] / rounds * 1000:.3f} CPU ms/turn |" for label in timers.cpu]


class Bench:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.names = itertools.count()

    def memory(self) -> Memory:
        return Memory(storage=DuckDBStorage(self.folder / f"m{next(self.names)}.duckdb"))

    def path(self, suffix: str) -> Path:
        return self.folder / f"f{next(self.names)}{suffix}"

    def durable(self, default: type, *methods: str) -> type:
        """The framework's own in-process ``default`` made as durable as a store must be at
        least: each of ``methods`` (the calls the framework waits on to have stored something)
        also overwrites 600 bytes of a file and ``fdatasync``s it, with no other work. What
        that costs over ``default`` is what durability alone costs: no store that syncs each
        of these calls can make a turn cheaper than this one's."""
        fd = os.open(self.path(".sync"), os.O_RDWR | os.O_CREAT)
        os.pwrite(fd, bytes(4096), 0)
        os.fsync(fd)

        def synced(name: str) -> Callable[..., Any]:
            def call(store: Any, *args: Any, **kwargs: Any) -> Any:
                result = getattr(default, name)(store, *args, **kwargs)
                os.pwrite(fd, b"x" * 600, 0)
                os.fdatasync(fd)
                return result
            return call

        return type(f"Durable{default.__name__}", (default,), {name: synced(name) for name in methods})


# ----------------------------------------------------------------------------- frameworks

def langgraph(bench: Bench, durability: str) -> dict[str, Turn]:
    from bench_langgraph import review_graph
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    from threadrecall.integrations.langgraph import ThreadRecallSaver

    def run_on(saver: Any) -> Turn:
        graph = review_graph(saver)
        ids = itertools.count()

        def run() -> Any:
            config = {"configurable": {"thread_id": f"run-{next(ids)}"}}
            graph.invoke({"steps": []}, config, durability=durability)
            return graph.invoke(Command(resume="yes"), config, durability=durability)
        return run

    return {"InMemorySaver": run_on(InMemorySaver()),
            "InMemorySaver, durable floor": run_on(bench.durable(InMemorySaver, "put", "put_writes")()),
            "threadrecall": run_on(ThreadRecallSaver(bench.memory()))}


def pydantic_ai(bench: Bench) -> dict[str, Turn]:
    from pydantic_ai import Agent
    from pydantic_ai.conversation import Conversation
    from pydantic_ai.conversation_store import InMemoryConversationStore
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.usage import UsageLimits

    from threadrecall.integrations.pydantic_ai import ThreadRecallConversationStore

    def turn_on(store: Any) -> Turn:
        loop = asyncio.new_event_loop()
        agent = Agent(TestModel(custom_output_text="Noted."))

        async def turn(prompt: str) -> None:
            conversation = await store.load("c1") or Conversation(conversation_id="c1")
            result = await agent.run(prompt, conversation=conversation,
                                     usage_limits=UsageLimits(request_limit=None))
            await store.save(result)

        for i in range(50):
            loop.run_until_complete(turn(f"message {i}"))
        prompts = itertools.count()
        return lambda: loop.run_until_complete(turn(f"more {next(prompts)}"))

    return {"InMemoryConversationStore": turn_on(InMemoryConversationStore()),
            "threadrecall": turn_on(ThreadRecallConversationStore(bench.memory()))}


def openai_agents(bench: Bench) -> dict[str, Turn]:
    from agents import Agent, Runner, SQLiteSession, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from threadrecall.integrations.openai_agents import ThreadRecallSession

    @function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"Sunny in {city}"

    history = [item for i in range(20) for item in (
        {"role": "user", "content": f"Question {i}: what is the weather in city {i}?"},
        {"role": "assistant", "content": f"It is sunny in city {i}."})]

    def turn_on(session: Any) -> Turn:
        loop = asyncio.new_event_loop()
        loop.run_until_complete(session.add_items(history))
        model = ScriptedModel()
        agent = Agent(name="weather", model=model, tools=[get_weather])
        calls = itertools.count()

        def turn() -> Any:
            i = next(calls)
            model.extend([[function_call("get_weather", {"city": f"c{i}"}, call_id=f"call-{i}")],
                          [assistant_message(f"Sunny in c{i}.")]])
            return loop.run_until_complete(Runner.run(agent, f"Weather in c{i}?", session=session))
        return turn

    return {"SQLiteSession in memory": turn_on(SQLiteSession("bench")),
            "SQLiteSession on a file": turn_on(SQLiteSession("bench", bench.path(".db"))),
            "threadrecall": turn_on(ThreadRecallSession("bench", bench.memory()))}


def langchain(bench: Bench) -> dict[str, Turn]:
    from langchain_core.chat_history import InMemoryChatMessageHistory
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
    from langchain_core.runnables.history import RunnableWithMessageHistory

    from threadrecall.integrations.langchain import ThreadRecallChatMessageHistory

    def turn_on(history: Any) -> Turn:
        history.add_messages([m for i in range(20) for m in (
            HumanMessage(f"Question {i}: what is the weather in city {i}?"), AIMessage(f"It is sunny in city {i}."))])
        model = GenericFakeChatModel(messages=(AIMessage(f"Answer {i}") for i in itertools.count()))
        prompt = ChatPromptTemplate.from_messages([("system", "You are helpful."), MessagesPlaceholder("history"),
                                                   ("human", "{question}")])
        chain = RunnableWithMessageHistory(prompt | model, lambda _: history,
                                           input_messages_key="question", history_messages_key="history")
        questions = itertools.count()
        config = {"configurable": {"session_id": "bench"}}
        return lambda: chain.invoke({"question": f"Q{next(questions)}"}, config)

    return {"InMemoryChatMessageHistory": turn_on(InMemoryChatMessageHistory()),
            "threadrecall": turn_on(ThreadRecallChatMessageHistory(bench.memory(), "bench", resource_id="bench"))}


def llama_index(bench: Bench) -> dict[str, Turn]:
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.chat_engine import SimpleChatEngine
    from llama_index.core.llms import MockLLM
    from llama_index.core.memory import ChatMemoryBuffer
    from llama_index.core.storage.chat_store import SimpleChatStore

    from threadrecall.integrations.llama_index import ThreadRecallChatStore

    def turn_on(store: Any) -> Turn:
        store.set_messages("bench", [m for i in range(20) for m in (
            ChatMessage(role="user", content=f"Question {i}: what is the weather in city {i}?"),
            ChatMessage(role="assistant", content=f"It is sunny in city {i}."))])
        buffer = ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key="bench", token_limit=100_000,
                                                tokenizer_fn=str.split)
        engine = SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=8), memory=buffer)
        questions = itertools.count()
        return lambda: engine.chat(f"Question {next(questions)}")

    return {"SimpleChatStore": turn_on(SimpleChatStore()),
            "SimpleChatStore, durable floor": turn_on(bench.durable(
                SimpleChatStore, "add_message", "set_messages")()),
            "threadrecall": turn_on(ThreadRecallChatStore(bench.memory()))}


def llama_index_history(bench: Bench) -> dict[str, Turn]:
    """A stateless chat server's turn: the client hands back the history it was given with
    its next question (``chat(question, chat_history=...)``, which sets the store's messages
    to it), and gets the new history back."""
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.chat_engine import SimpleChatEngine
    from llama_index.core.llms import MockLLM
    from llama_index.core.memory import ChatMemoryBuffer
    from llama_index.core.storage.chat_store import SimpleChatStore

    from threadrecall.integrations.llama_index import ThreadRecallChatStore

    def turn_on(store: Any) -> Turn:
        history = [m for i in range(20) for m in (
            ChatMessage(role="user", content=f"Question {i}: what is the weather in city {i}?"),
            ChatMessage(role="assistant", content=f"It is sunny in city {i}."))]
        buffer = ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key="bench", token_limit=100_000,
                                                tokenizer_fn=str.split)
        engine = SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=8), memory=buffer)
        questions = itertools.count()

        def turn() -> None:
            nonlocal history
            engine.chat(f"Question {next(questions)}", chat_history=history)
            history = engine.chat_history
        return turn

    return {"SimpleChatStore": turn_on(SimpleChatStore()),
            "threadrecall": turn_on(ThreadRecallChatStore(bench.memory()))}


def llama_index_memory(bench: Bench) -> dict[str, Turn]:
    """An agent's turn on LlamaIndex's ``Memory`` (the one with a queue and an archive): put
    the question, get the history, put the answer; on its default ``SQLAlchemyChatStore``
    (SQLite in memory) and on ``ThreadRecallDBChatStore``."""
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.memory import Memory as LlamaMemory
    from llama_index.core.storage.chat_store.sql import SQLAlchemyChatStore

    from threadrecall.integrations.llama_index import ThreadRecallDBChatStore

    def turn_on(store: Any) -> Turn:
        loop = asyncio.new_event_loop()
        memory = LlamaMemory.from_defaults(session_id="bench", chat_store=store, token_limit=100_000)
        loop.run_until_complete(memory.aput_messages([m for i in range(20) for m in (
            ChatMessage(role="user", content=f"Question {i}: what is the weather in city {i}?"),
            ChatMessage(role="assistant", content=f"It is sunny in city {i}."))]))
        questions = itertools.count()

        async def turn() -> None:
            i = next(questions)
            await memory.aput(ChatMessage(role="user", content=f"Question {i}"))
            await memory.aget()
            await memory.aput(ChatMessage(role="assistant", content=f"Answer {i}"))
        return lambda: loop.run_until_complete(turn())

    return {"SQLAlchemyChatStore": turn_on(SQLAlchemyChatStore(table_name="bench")),
            "threadrecall": turn_on(ThreadRecallDBChatStore(bench.memory()))}


def floor(bench: Bench) -> dict[str, Turn]:
    """The durable-write floor: what one commit costs on this disk, and what of it is the
    statement rather than the disk (the same insert into an in-memory database)."""
    memory = bench.memory()
    memory.create_thread("r", thread_id="floor")
    ids = itertools.count()
    con = duckdb.connect(str(bench.path(".duckdb")))
    con.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, v TEXT)")
    mem = duckdb.connect(":memory:")
    mem.execute("CREATE TABLE t (id BIGINT PRIMARY KEY, v TEXT)")
    fd = os.open(bench.path(".log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    def raw() -> None:
        con.execute("BEGIN")
        con.execute("INSERT INTO t VALUES (?, ?)", [next(ids), "x" * 200])
        con.execute("COMMIT")

    def in_memory() -> None:
        mem.execute("BEGIN")
        mem.execute("INSERT INTO t VALUES (?, ?)", [next(ids), "x" * 200])
        mem.execute("COMMIT")

    appender = con.cursor()
    appender.execute("CREATE TABLE a (id BIGINT PRIMARY KEY, v TEXT)")
    rows = appender.appender("a")

    def appended() -> None:
        rows.append_row(next(ids), "x" * 200)
        rows.flush()

    def sync() -> None:
        os.write(fd, b"x" * 200)
        os.fdatasync(fd)

    return {"fdatasync of a 200-byte append": sync, "DuckDB insert, own transaction": raw,
            "the same insert, in-memory database": in_memory,
            "the same row through an appender, auto-commit": appended,
            "save_messages of one message": lambda: memory.save_messages(
                [{"thread_id": "floor", "role": "user", "content": f"m{next(ids)}"}])}


FRAMEWORKS: dict[str, Callable[[Bench], dict[str, Turn]]] = {
    "floor": floor,
    "langgraph": lambda bench: langgraph(bench, "async"),
    "langgraph-exit": lambda bench: langgraph(bench, "exit"),
    "pydantic-ai": pydantic_ai,
    "openai-agents": openai_agents,
    "langchain": langchain,
    "llama-index": llama_index,
    "llama-index-history": llama_index_history,
    "llama-index-memory": llama_index_memory,
}


# ----------------------------------------------------------------------------- timing

def interleaved(turns: dict[str, Turn], rounds: int, warmup: int = 3
                ) -> tuple[dict[str, list[float]], dict[str, list[float]], tuple[float, float]]:
    """Seconds per turn of each backend, wall-clock and CPU, and threadrecall's commits per
    turn (all, and those made by a journal append)."""
    names = list(turns)
    for _ in range(warmup):
        for name in names:
            turns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    commits = journalled = 0
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            before, before_journalled = Commits.count, Commits.journalled
            start, start_cpu = time.perf_counter(), time.process_time()
            turns[name]()
            times[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
            if name == "threadrecall":
                commits += Commits.count - before
                journalled += Commits.journalled - before_journalled
    return times, cpu, (commits / rounds, journalled / rounds)


def report(framework: str, times: dict[str, list[float]], cpu: dict[str, list[float]],
           commits: tuple[float, float]) -> list[str]:
    ms = {name: sorted(t * 1000 for t in ts) for name, ts in times.items()}
    stats = {name: (statistics.median(v), v[0], v[int(len(v) * 0.9)]) for name, v in ms.items()}
    cpu_ms = {name: statistics.median(ts) * 1000 for name, ts in cpu.items()}
    first = next(iter(stats))
    base = stats[first]
    lines = []
    for name, (median, best, p90) in stats.items():
        ratio = cpu_ratio = ""
        if framework != "floor" and name != first:
            ratio = f"{median / base[0]:.2f}x ({best / base[1]:.2f}x best, {p90 / base[2]:.2f}x p90)"
            cpu_ratio = f" ({cpu_ms[name] / cpu_ms[first]:.2f}x)" if cpu_ms[first] > 0 else ""
        extra = (f", {commits[0]:.1f} commits/turn ({commits[1]:.1f} journalled)"
                 if name == "threadrecall" else "")
        lines.append(f"| {framework} | {name} | {median:.2f} | {best:.2f} | {p90:.2f} | {ratio}{extra} "
                     f"| {cpu_ms[name]:.2f}{cpu_ratio} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--only", default=",".join(FRAMEWORKS), help="comma-separated: " + ", ".join(FRAMEWORKS))
    parser.add_argument("--breakdown", action="store_true",
                        help="then time threadrecall's adapter calls and journal, per turn")
    args = parser.parse_args()
    Commits.install()
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    print("| framework | backend | median ms | best ms | p90 ms | / default | CPU ms (/ default) |")
    print("|---|---|---|---|---|---|---|")
    parts: list[str] = []
    with tempfile.TemporaryDirectory() as folder:
        bench = Bench(Path(folder))
        for framework in args.only.split(","):
            turns = FRAMEWORKS[framework](bench)
            times, cpu, commits = interleaved(turns, args.rounds)
            print("\n".join(report(framework, times, cpu, commits)), flush=True)
            if args.breakdown and "threadrecall" in turns:
                parts.extend(breakdown(framework, turns["threadrecall"], args.rounds))
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    if parts:
        print("\n| framework | threadrecall call | per turn | CPU |\n|---|---|---|---|")
        print("\n".join(parts))


if __name__ == "__main__":
    main()
