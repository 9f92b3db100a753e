"""Blocking code run on an event loop, its database round trips awaited on that loop.

``await run(fn, *args)`` calls ``fn`` in a greenlet on the loop's own thread. Where ``fn``
reaches a round trip it calls ``wait(awaitable)``: the greenlet pauses, the task awaits the
awaitable (the loop meanwhile serves other tasks) and the greenlet resumes with its result or
its exception. So one body of code — ``PostgresStorage``'s statements and ``Memory``'s logic
around them — serves the blocking API on a pooled ``psycopg.Connection`` and the async one on
an ``AsyncConnection``, without a thread per call.

A cancelled task's ``CancelledError`` is raised inside ``fn`` at the round trip it was waiting
for, so its ``with`` blocks unwind (a connection goes back to its pool) before the error
reaches the caller.

Each call runs with a copy of the task's context. ``task_state()`` gives the calls of one task
a shared dict (an open transaction lives there) for as long as it is entered.

>>> import asyncio
>>> async def twice(x):
...     await asyncio.sleep(0)
...     return 2 * x
>>> asyncio.run(run(lambda: wait(twice(21))))
42
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any, TypeVar

try:
    import greenlet
except ImportError:  # pragma: no cover - greenlet comes with the postgres extra
    greenlet = None  # type: ignore[assignment]

__all__ = ["awaiting", "entered", "run", "state", "task_state", "wait"]

T = TypeVar("T")

_STATE: contextvars.ContextVar[dict[Any, Any] | None] = contextvars.ContextVar(
    "threadrecall_task_state", default=None)

if greenlet is not None:
    class _Call(greenlet.greenlet):  # type: ignore[misc, name-defined]
        """A greenlet started by ``run``: it knows its driver and its task's state."""

        def __init__(self, fn: Callable[[], Any], driver: Any, shared: dict[Any, Any]) -> None:
            super().__init__(fn, driver)
            self.driver = driver
            self.state = shared


def awaiting() -> bool:
    """Whether the caller runs inside ``run`` (its round trips are to be awaited).

    >>> awaiting()
    False
    """
    return greenlet is not None and isinstance(greenlet.getcurrent(), _Call)


def state() -> dict[Any, Any]:
    """The state of the running call's task (see ``task_state``); only inside ``run``."""
    current = greenlet.getcurrent() if greenlet is not None else None
    if not isinstance(current, _Call):
        raise RuntimeError("state() needs a call started by loop_bridge.run")
    return current.state


def wait(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` on the loop from blocking code started by ``run``."""
    current = greenlet.getcurrent() if greenlet is not None else None
    if not isinstance(current, _Call):
        raise RuntimeError("wait() needs a call started by loop_bridge.run")
    return current.driver.switch(awaitable)


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Call ``fn(*args, **kwargs)`` on this loop, awaiting each ``wait`` it reaches."""
    if greenlet is None:
        raise RuntimeError("the async PostgreSQL calls need greenlet (pip install greenlet)")
    shared = _STATE.get()
    call = _Call(lambda: fn(*args, **kwargs), greenlet.getcurrent(),
                 shared if shared is not None else {})
    call.gr_context = contextvars.copy_context()
    step = call.switch()
    while not call.dead:
        try:
            value = await step
        except BaseException as exc:  # noqa: BLE001 - handed to fn, which decides
            step = call.throw(exc)
        else:
            step = call.switch(value)
    return step


@asynccontextmanager
async def task_state() -> AsyncIterator[dict[Any, Any]]:
    """A state shared by the ``run`` calls of this task while entered (the outermost one)."""
    shared = _STATE.get()
    if shared is not None:
        yield shared
        return
    token = _STATE.set({})
    try:
        yield _STATE.get()  # type: ignore[misc]
    finally:
        _STATE.reset(token)


@contextmanager
def entered(manager: AbstractAsyncContextManager[T]) -> Iterator[T]:
    """An async context manager entered and left from blocking code inside ``run``."""
    value = wait(manager.__aenter__())
    try:
        yield value
    except BaseException as exc:
        if not wait(manager.__aexit__(type(exc), exc, exc.__traceback__)):
            raise
    else:
        wait(manager.__aexit__(None, None, None))
