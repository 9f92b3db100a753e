"""How vectors join their graphs: the background linker of small writes, and the threads that
link a bulk write at once.

A committed vector is searchable at once (searches stay exact for vectors still waiting) and
joins the graph later: ``Linker`` is a daemon thread that links waiting vectors a small chunk
at a time, each chunk holding the index's write lock only briefly, at the lowest CPU priority,
and sleeps while there is nothing to link. A large backlog read from a shared database (an
index rebuilt from its rows, or a catch-up with other processes' bulk writes) is linked on
every core by a thread of its own (``Linker.link_backlog``), so the search that brought it
answers at once, from exact scans of the waiting vectors.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from ..errors import ConfigurationError
from .loaded import Loaded

__all__ = ["Linker", "THREADS_ENV", "default_threads", "weakly"]

log = logging.getLogger(__name__)

# Vectors the background linker links per hold of an index's write lock.
LINK_CHUNK = 64
# Vectors a backlog thread links per batch: each batch holds the index's read lock (searches
# go on beside it) and a write waits for it to end, so a batch is kept to a fraction of a second.
BACKLOG_BATCH = 256
# Seconds an idle linker sleeps before looking again (a write wakes it sooner).
LINK_IDLE_WAIT = 5.0
# The linker thread's niceness: it links with CPU time nothing else wants.
LINKER_NICE = 19
# The environment variable naming how many threads link a bulk backlog.
THREADS_ENV = "THREADRECALL_THREADS"


def default_threads() -> int:
    """Threads for bulk linking: ``THREADRECALL_THREADS``, else the cores this process may use."""
    value = os.environ.get(THREADS_ENV)
    if value is not None:
        try:
            threads = int(value)
        except ValueError:
            threads = 0
        if threads < 1:
            raise ConfigurationError(f"{THREADS_ENV} must be a positive integer, got {value!r}")
        return threads
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def weakly(method: Callable[[], None]) -> Callable[[], None]:
    """``method``, called only while its object lives (so a thread holding it keeps no store
    alive)."""
    ref = weakref.WeakMethod(method)

    def call() -> None:
        bound = ref()
        if bound is not None:
            bound()

    return call


class Linker:
    """A daemon thread linking waiting vectors into the graphs of loaded indexes, one chunk
    at a time, round-robin; started by the first wake-up, asleep while there is no work.
    Whenever a round finds nothing to link it calls ``on_idle`` (the store saves lagging
    index files then, off the writers' path)."""

    def __init__(self, loaded: dict[str, Loaded], on_idle: Callable[[], None]) -> None:
        self._loaded = loaded  # the store's own dict, read as a snapshot each round
        self._on_idle = on_idle
        self._wake = threading.Event()
        self._guard = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._bulk: dict[int, threading.Thread] = {}  # by id() of the index it links

    def wake(self) -> None:
        """Start the thread if needed and tell it there may be work."""
        with self._guard:
            if self._stopped:
                return
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="threadrecall-linker", daemon=True)
                self._thread.start()
        self._wake.set()

    def link_backlog(self, index: Any, threads: int) -> None:
        """Link every waiting vector of ``index`` on ``threads`` threads, in a daemon thread of
        its own (one per index at a time; it returns when nothing waits, or after the batch
        it is linking when ``stop`` is called: the rest waits, searched exactly, for the next
        open)."""
        with self._guard:
            if self._stopped or id(index) in self._bulk:
                return
            thread = self._bulk[id(index)] = threading.Thread(
                target=self._link_all, args=(index, threads), name="threadrecall-bulk-linker", daemon=True)
            thread.start()  # under the guard: a stop() joins only started threads

    def _link_all(self, index: Any, threads: int) -> None:
        # At normal priority: a batch holds the read lock, and a write (and every search queued
        # behind it) waits for the batch, which must not be starved by the processes around it.
        try:
            while index.pending and not self._stopped:
                index.link_all(threads, BACKLOG_BATCH, rounds=1)
        finally:
            with self._guard:
                del self._bulk[id(index)]
        self._wake.set()  # the idle linker saves what is due

    def stop(self) -> None:
        """Stop the threads after their current chunk or batch; no later wake-up restarts
        them."""
        with self._guard:
            self._stopped = True
            threads = [self._thread, *self._bulk.values()]
        self._wake.set()
        for thread in threads:
            if thread is not None and thread is not threading.current_thread():
                thread.join()

    def _run(self) -> None:
        lower_priority()
        while not self._stopped:
            self._wake.clear()
            linked = 0
            for loaded in list(self._loaded.values()):
                if self._stopped:
                    return
                if id(loaded.index) in self._bulk:  # its backlog thread links it: a chunk's
                    continue  # write would wait for a batch, and every search behind it
                linked += loaded.index.link_pending(LINK_CHUNK)
            if not linked:
                try:
                    self._on_idle()
                except Exception as exc:  # e.g. a full disk: retried when next idle, linking goes on
                    log.warning("saving an index file failed: %s", exc)
                self._wake.wait(LINK_IDLE_WAIT)


def lower_priority() -> None:
    """Give the calling thread the lowest CPU priority where the platform allows it per thread
    (Linux), so linking takes only time that writes and searches leave idle."""
    if sys.platform.startswith("linux"):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), LINKER_NICE)
        except OSError:  # not permitted: run at normal priority
            pass
