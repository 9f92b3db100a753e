"""``WriteGate``: while a write call runs, new reads wait at the door.

Reads (``recall``) spend most of their time in Python between short core calls, so eight
threads recalling in a loop keep the interpreter lock busy; a write that takes the lock back
after each DuckDB statement would queue behind all of them each time (a save of two messages
went from 15 ms to 180 ms). With the gate, a write waits only for the reads already under way;
reads wait at most for the writes in progress, so neither side starves.

A thread inside ``Memory.transaction()`` may hold the database's write lock while it reads;
its reads never wait (the writes they would wait for may be waiting for that lock).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Concatenate, ParamSpec, TypeVar

from .loop_bridge import awaiting

__all__ = ["WriteGate", "gated_write"]

P = ParamSpec("P")
R = TypeVar("R")


class WriteGate:
    """Admission of one ``Memory``'s calls: writes first.

    >>> gate = WriteGate()
    >>> with gate.writing():
    ...     gate.busy
    True
    >>> gate.wait_for_writes()  # no write: returns at once
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writers = 0
        self._idle = threading.Event()
        self._idle.set()
        self._local = threading.local()

    @property
    def busy(self) -> bool:
        """Whether a write call is running."""
        return not self._idle.is_set()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Mark a write call as running for its duration."""
        with self._lock:
            self._writers += 1
            self._idle.clear()
        try:
            yield
        finally:
            with self._lock:
                self._writers -= 1
                if not self._writers:
                    self._idle.set()

    @contextmanager
    def holding_transaction(self) -> Iterator[None]:
        """Mark this thread as inside an explicit transaction: its reads never wait."""
        self._local.depth = getattr(self._local, "depth", 0) + 1
        try:
            yield
        finally:
            self._local.depth -= 1

    def wait_for_writes(self) -> None:
        """Return once no write call is running (at once inside a transaction, and for calls
        awaited on an event loop, whose writes wait on the same thread)."""
        if not self._idle.is_set() and not getattr(self._local, "depth", 0) and not awaiting():
            self._idle.wait()


def gated_write(method: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], R]:
    """A ``Memory`` method that runs as a write: reads starting meanwhile wait for it."""

    @functools.wraps(method)
    def write(self: Any, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._gate.writing():
            return method(self, *args, **kwargs)

    return write
