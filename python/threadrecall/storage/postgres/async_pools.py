"""The async connection pools of one ``PostgresStorage``: one per event loop that uses it.

An ``AsyncConnectionPool`` belongs to the loop it was opened on, and a program may run
several loops one after another (each ``asyncio.run``), so a storage opens a pool on each
loop's first async call, and closes it when that loop shuts down: a task of the loop waits
for the loop's end (``asyncio.run`` cancels it) and closes the pool then. Left to that
cancellation instead, a pool's worker cancelled while it connects takes it for a failed
connection attempt and goes on waiting for work, and ``asyncio.run`` never returns. A pool
given by the caller serves every call as it is, and is left open by ``close()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Mapping
from typing import Any

from psycopg import AsyncConnection, errors
from psycopg_pool import AsyncConnectionPool

__all__ = ["LoopPools", "fetch"]

_RETRIED = (errors.DeadlockDetected, errors.SerializationFailure)


class LoopPools:
    """Async pools by event loop, opened on first use with the storage's connection settings."""

    def __init__(self, conninfo: str, kwargs: Mapping[str, Any], max_size: int, name: str,
                 given: AsyncConnectionPool | None = None) -> None:
        self._conninfo, self._kwargs, self._max_size, self._name = conninfo, dict(kwargs), max_size, name
        self._given = given
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncConnectionPool] = (
            weakref.WeakKeyDictionary())
        # Per loop, the event that asks its keeper task to close its pool, and that task.
        self._keepers: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, tuple[asyncio.Event, asyncio.Task[None]]] = (
            weakref.WeakKeyDictionary())

    async def pool(self) -> AsyncConnectionPool:
        """The pool of the running loop."""
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            pool = AsyncConnectionPool(self._conninfo, min_size=1, max_size=self._max_size,
                                       kwargs={**self._kwargs, "autocommit": True}, open=False,
                                       name=f"{self._name}.async")
            self._pools[loop] = pool
            stop = asyncio.Event()
            self._keepers[loop] = stop, loop.create_task(self._keep(loop, pool, stop),
                                                         name=f"{self._name}.async-keeper")
            await pool.open()
        return pool

    async def _keep(self, loop: asyncio.AbstractEventLoop, pool: AsyncConnectionPool,
                    stop: asyncio.Event) -> None:
        """Close ``pool`` once asked to, or once its loop shuts down (this task cancelled)."""
        try:
            await stop.wait()
        finally:
            if self._pools.get(loop) is pool:
                del self._pools[loop]
            if self._keepers.get(loop, (None, None))[0] is stop:
                del self._keepers[loop]
            # At shutdown the pool's workers were cancelled too: waiting for them ends in
            # their CancelledError once they stopped, which is all that is left to do.
            with contextlib.suppress(asyncio.CancelledError):
                await pool.close()

    async def fetch(self, query: str, params: Mapping[str, Any], *,
                    rows: bool = True, binary: bool = False) -> list[tuple[Any, ...]]:
        """One statement on a pooled connection, retried when PostgreSQL chose it as a
        deadlock victim (a lone statement is safe to redo)."""
        pool = await self.pool()
        for attempt in range(4):
            try:
                async with pool.connection() as conn:
                    return await fetch(conn, query, params, rows=rows, binary=binary)
            except _RETRIED:
                if attempt == 3:
                    raise
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        """Close the pool of the running loop (a given pool stays open)."""
        loop = asyncio.get_running_loop()
        self._pools.pop(loop, None)
        keeper = self._keepers.pop(loop, None)
        if keeper is not None:
            stop, task = keeper
            stop.set()
            await asyncio.wait([task])

    def close(self) -> None:
        """Close the pools this object opened: on a loop that is not running, at once; on a
        running loop, in the background (a closed loop closed its pool as it shut down)."""
        for loop, (stop, task) in list(self._keepers.items()):
            del self._keepers[loop]
            if loop.is_closed():
                continue
            if loop.is_running():
                loop.call_soon_threadsafe(stop.set)
            else:
                stop.set()
                loop.run_until_complete(asyncio.wait([task]))
        self._pools.clear()


async def fetch(conn: AsyncConnection, query: str, params: Mapping[str, Any], *,
                rows: bool = True, binary: bool = False) -> list[tuple[Any, ...]]:
    """Run one statement on ``conn`` and fetch its rows (``rows=False``: left unread;
    ``binary``: results in binary form)."""
    cursor = await conn.execute(query, params, binary=binary)
    return await cursor.fetchall() if rows else []
