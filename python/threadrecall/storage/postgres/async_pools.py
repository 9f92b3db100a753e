"""The async connection pools of one ``PostgresStorage``: one per event loop that uses it.

An ``AsyncConnectionPool`` belongs to the loop it was opened on, and a program may run
several loops one after another (each ``asyncio.run``), so a storage opens a pool on each
loop's first async call. A pool given by the caller serves every call as it is, and is left
open by ``close()``.
"""

from __future__ import annotations

import asyncio
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
            await pool.open()
        return pool

    async def fetch(self, query: str, params: Mapping[str, Any], *,
                    rows: bool = True) -> list[tuple[Any, ...]]:
        """One statement on a pooled connection, retried when PostgreSQL chose it as a
        deadlock victim (a lone statement is safe to redo)."""
        pool = await self.pool()
        for attempt in range(4):
            try:
                async with pool.connection() as conn:
                    return await fetch(conn, query, params, rows=rows)
            except _RETRIED:
                if attempt == 3:
                    raise
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        """Close the pool of the running loop (a given pool stays open)."""
        pool = self._pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.close()

    def close(self) -> None:
        """Close the pools this object opened whose loops are not running; a running loop's
        pool is closed on that loop, in the background."""
        for loop, pool in list(self._pools.items()):
            del self._pools[loop]
            if loop.is_closed():
                continue  # its connections went with the loop's sockets
            if loop.is_running():
                asyncio.run_coroutine_threadsafe(pool.close(), loop)
            else:
                loop.run_until_complete(pool.close())


async def fetch(conn: AsyncConnection, query: str, params: Mapping[str, Any], *,
                rows: bool = True) -> list[tuple[Any, ...]]:
    """Run one statement on ``conn`` and fetch its rows (``rows=False``: left unread)."""
    cursor = await conn.execute(query, params)
    return await cursor.fetchall() if rows else []
