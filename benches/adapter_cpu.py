"""Where the CPU of a LangGraph or LlamaIndex turn goes: the thread CPU time spent in each of
the adapter's methods, and inside them in ``Memory.save_messages`` and in the commit.

The turns are those of ``compare_integrations.py`` (LangGraph's interrupted and resumed run,
LlamaIndex's ``SimpleChatEngine.chat``), run in alternation with the framework's default
backend. Each adapter method is timed with ``time.thread_time`` in the thread that runs it
(LangGraph calls its checkpointer from background threads, which the process CPU of a turn
counts but a timer around the turn in the main thread would split from their cause); a call
made inside another timed method counts only in the outer one. The turn's CPU is a median;
the parts are means per turn (a rare cost such as applying the journal counts in full).

Run: ``python benches/adapter_cpu.py [--rounds 40] [--only langgraph,llama-index]``.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from compare_integrations import FRAMEWORKS, Bench

from threadrecall import Memory
from threadrecall.storage.duckdb import database


class Meter:
    """Thread CPU seconds per label, summed since the last ``take``."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = collections.defaultdict(float)
        self.calls: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._inside = threading.local()

    def time(self, owner: Any, name: str, label: str, *, outer: bool) -> None:
        """Time ``owner.name`` under ``label``; an ``outer`` method nested in another outer
        one counts only there."""
        method = getattr(owner, name)
        meter = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            if outer and getattr(meter._inside, "on", False):
                return method(*args, **kwargs)
            if outer:
                meter._inside.on = True
            start = time.thread_time()
            try:
                return method(*args, **kwargs)
            finally:
                spent = time.thread_time() - start
                if outer:
                    meter._inside.on = False
                with meter._lock:
                    meter.spent[label] += spent
                    meter.calls[label] += 1

        setattr(owner, name, timed)

    def take(self) -> tuple[dict[str, float], collections.Counter[str]]:
        with self._lock:
            spent, calls = dict(self.spent), self.calls.copy()
            self.spent.clear()
            self.calls.clear()
        return spent, calls


def install(framework: str, meter: Meter) -> None:
    if framework == "langgraph":
        from threadrecall.integrations.langgraph import ThreadRecallSaver
        for name in ("get_tuple", "list", "put", "put_writes", "get_next_version"):
            meter.time(ThreadRecallSaver, name, f"ThreadRecallSaver.{name}", outer=True)
        meter.time(ThreadRecallSaver, "_commit", "  of which the write (grouped commit)", outer=False)
    else:
        from threadrecall.integrations.llama_index import ThreadRecallChatStore
        for name in ("get_messages", "add_message", "set_messages"):
            meter.time(ThreadRecallChatStore, name, f"ThreadRecallChatStore.{name}", outer=True)
    meter.time(Memory, "save_messages", "  of which Memory.save_messages", outer=False)
    meter.time(database._Writer, "finish", "  of which committing", outer=False)
    meter.time(database.Database, "settle", "  of which applying the journal to DuckDB", outer=False)
    from threadrecall.storage.duckdb import DuckDBStorage
    meter.time(DuckDBStorage, "_mirror", "  of which mirroring into the replica", outer=False)


def measure(framework: str, rounds: int) -> list[str]:
    meter = Meter()
    install(framework, meter)
    with tempfile.TemporaryDirectory() as folder:
        turns = FRAMEWORKS[framework](Bench(Path(folder)))
        default_name = next(iter(turns))
        ours, default = turns["threadrecall"], turns[default_name]
        per_turn: dict[str, float] = collections.defaultdict(float)
        calls: collections.Counter[str] = collections.Counter()
        cpu: dict[str, list[float]] = {"threadrecall": [], default_name: []}
        for _ in range(3):
            ours(), default()
        meter.take()
        for r in range(rounds):
            order: list[tuple[str, Callable[[], Any]]] = [("threadrecall", ours), (default_name, default)]
            for name, turn in order if r % 2 == 0 else reversed(order):
                start = time.process_time()
                turn()
                cpu[name].append(time.process_time() - start)
                if name == "threadrecall":
                    spent, counted = meter.take()
                    for label, seconds in spent.items():
                        per_turn[label] += seconds
                    calls.update(counted)
                else:
                    meter.take()
    ms = {name: statistics.median(v) * 1000 for name, v in cpu.items()}
    lines = [f"| {framework} | turn, process CPU (all threads) | {ms['threadrecall']:.2f} "
             f"| {ms[default_name]:.2f} ({default_name}) |"]
    for label, seconds in per_turn.items():
        lines.append(f"| {framework} | {label} ({calls[label] / rounds:.1f} calls) "
                     f"| {seconds / rounds * 1000:.2f} | |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--only", default="langgraph,llama-index")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    print("| framework | part | threadrecall CPU ms per turn | default's turn CPU ms |")
    print("|---|---|---|---|")
    for framework in args.only.split(","):
        print("\n".join(measure(framework, args.rounds)), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
