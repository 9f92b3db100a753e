"""Memory's async twins on PostgreSQL: awaited on async pooled connections of the running loop.

Each test runs its coroutines on one event loop against a real server. The checks that the
calls are truly awaited (not run in worker threads) are behavioural: transactions of one loop
wait for each other's advisory locks without blocking the loop, and the blocking pool serves
none of the async calls.
"""

from __future__ import annotations

import asyncio
import socket
import threading

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from threadrecall import Memory
from threadrecall.errors import ThreadNotFoundError
from threadrecall.storage import PostgresStorage
from threadrecall.storage.postgres.async_pools import LoopPools


@pytest.fixture
def storage(pg_dsn, pg_schema):
    store = PostgresStorage(pg_dsn, schema=pg_schema)
    yield store
    store.close()


def _turn(thread_id: str, n: int, resource_id: str = "u") -> list[dict]:
    return [{"id": f"{thread_id}-{n}-{k}", "thread_id": thread_id, "resource_id": resource_id,
             "role": role, "content": f"turn {n} {role}"} for k, role in enumerate(("user", "assistant"))]


def _count(dsn: str, schema: str, thread_id: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(psycopg.sql.SQL("SELECT count(*) FROM {}.messages WHERE thread_id = %s")
                            .format(psycopg.sql.Identifier(schema)), [thread_id]).fetchone()[0]


def test_many_concurrent_recalls_on_one_loop_match_the_blocking_ones(storage):
    memory = Memory(storage=storage)
    for t in range(8):
        memory.save_messages([m for n in range(5) for m in _turn(f"t{t}", n)])
    expected = {f"t{t}": [m.id for m in memory.recall(f"t{t}", per_page=4, page=1).messages] for t in range(8)}
    blocking_before = storage._pool.get_stats().get("requests_num", 0)
    loop_thread = []

    async def one(t: int):
        loop_thread.append(threading.get_ident())
        result = await memory.arecall(f"t{t % 8}", resource_id="u", per_page=4, page=1)
        return f"t{t % 8}", [m.id for m in result.messages], result.total

    async def main():
        results = await asyncio.gather(*(one(t) for t in range(200)))
        stats = (await storage._apools.pool()).get_stats()
        return results, stats

    results, stats = asyncio.run(main())
    assert all(ids == expected[t] and total == 10 for t, ids, total in results)
    assert stats["requests_num"] == 200  # each recall: one statement, the owner checked by the page
    assert stats["pool_size"] > 1  # calls overlapped: the pool grew beyond one connection
    assert storage._pool.get_stats().get("requests_num", 0) == blocking_before
    assert len(set(loop_thread)) == 1


def test_transactions_of_one_loop_wait_for_each_others_lock_without_blocking_it(storage):
    memory = Memory(storage=storage)
    memory.create_thread("u", thread_id="t1")
    order: list[str] = []
    ticks = 0

    async def holder(entered: asyncio.Event):
        async with memory.atransaction(lock="t1"):
            entered.set()
            start = ticks
            await memory.asave_messages(_turn("t1", 0))
            # The other transaction waits for the lock meanwhile; were its wait to block the
            # loop, the ticks would stop and this would time out.
            while ticks < start + 10:
                await asyncio.sleep(0.01)
            order.append("first committed")

    async def waiter(entered: asyncio.Event):
        await entered.wait()
        async with memory.atransaction(lock="t1"):
            total = (await memory.arecall("t1", per_page=False)).total  # waits for the lock
            order.append("second read")
            await memory.asave_messages(_turn("t1", 1))
        return total

    async def main():
        entered = asyncio.Event()

        async def ticker():
            nonlocal ticks
            while len(order) < 2:
                ticks += 1
                await asyncio.sleep(0.01)

        results = await asyncio.wait_for(asyncio.gather(holder(entered), waiter(entered), ticker()), 30)
        return results[1]

    seen = asyncio.run(main())
    assert order == ["first committed", "second read"]
    assert seen == 2  # the second read after the first committed
    assert memory.recall("t1", per_page=False).total == 4


def test_atransaction_commits_together_or_rolls_back_together(storage, pg_dsn, pg_schema):
    memory = Memory(storage=storage)

    async def main():
        async with memory.atransaction():
            await memory.acreate_thread("u", thread_id="t1", title="kept")
            await memory.asave_messages(_turn("t1", 0))
            await memory.aupdate_thread("t1", metadata={"a": 1})
            inside = (await memory.arecall("t1", per_page=False)).total
            outside = _count(pg_dsn, pg_schema, "t1")  # another connection: nothing committed yet
        with pytest.raises(RuntimeError):
            async with memory.atransaction():
                await memory.asave_messages(_turn("t1", 1))
                await memory.aupdate_thread("t1", title="dropped")
                raise RuntimeError("give up")
        return inside, outside

    inside, outside = asyncio.run(main())
    assert (inside, outside) == (2, 0)
    thread = memory.get_thread_by_id("t1")
    assert (thread.title, thread.metadata) == ("kept", {"a": 1})
    assert memory.recall("t1", per_page=False).total == 2
    # The change feed saw the committed write only.
    changes = storage.changes_since(0)
    assert sorted(r[0] for r in changes.upserted) == ["t1-0-0", "t1-0-1"]


def test_errors_of_awaited_calls_are_the_blocking_ones(storage):
    memory = Memory(storage=storage)

    async def main():
        with pytest.raises(ThreadNotFoundError):
            await memory.arecall("missing", resource_id="u")
        with pytest.raises(ThreadNotFoundError):
            await memory.asave_messages([{"thread_id": "no-owner", "role": "user", "content": "x"}])

    asyncio.run(main())
    assert memory.get_thread_by_id("no-owner") is None


def test_cancelled_calls_and_transactions_return_their_connections(storage):
    memory = Memory(storage=storage)
    memory.create_thread("u", thread_id="t1")
    memory.save_messages(_turn("t1", 0))

    async def in_transaction(n: int):
        async with memory.atransaction(lock="t1"):
            await memory.asave_messages(_turn("t1", 100 + n))
            await asyncio.sleep(10)  # cancelled here: nothing of it may commit

    async def main():
        tasks = [asyncio.create_task(memory.arecall("t1", per_page=2)) for _ in range(30)]
        tasks += [asyncio.create_task(memory.asave_messages(_turn("t1", 1 + n))) for n in range(10)]
        tasks += [asyncio.create_task(in_transaction(n)) for n in range(5)]
        for delay in (0, 0, 0.001, 0.005, 0.02):
            await asyncio.sleep(delay)
            for task in tasks[::3]:
                task.cancel()
        await asyncio.sleep(0.3)
        for task in tasks:
            task.cancel()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        pool = await storage._apools.pool()
        stats = pool.get_stats()
        # The pool still serves: a fresh transaction and recall go through at once.
        async with memory.atransaction(lock="t1"):
            await memory.asave_messages(_turn("t1", 999))
        total = (await memory.arecall("t1", per_page=False)).total
        return outcomes, stats, total

    outcomes, stats, total = asyncio.run(main())
    assert any(isinstance(o, asyncio.CancelledError) for o in outcomes)
    assert not [o for o in outcomes if isinstance(o, Exception)]
    assert stats["pool_available"] == stats["pool_size"]  # every connection is back
    assert stats.get("requests_waiting", 0) == 0
    saves = {m.id.split("-")[1] for m in memory.recall("t1", per_page=False).messages}
    assert not {s for s in saves if int(s) >= 100 and s != "999"}  # no cancelled transaction wrote
    assert total == len(saves) * 2


def test_a_given_async_pool_serves_the_awaited_calls(pg_dsn, pg_schema):
    async def main():
        pool = AsyncConnectionPool(pg_dsn, min_size=1, max_size=4, open=False, kwargs={"autocommit": True})
        await pool.open()
        storage = PostgresStorage(pool, schema=pg_schema)
        memory = Memory(storage=storage)
        await memory.asave_messages(_turn("t1", 0))
        recalled = [m.id for m in (await memory.arecall("t1")).messages]
        used = pool.get_stats()["requests_num"]
        memory.close()  # the pool is the caller's: still open
        async with pool.connection() as conn:
            await conn.execute("SELECT 1")
        await pool.close()
        with Memory(storage=PostgresStorage(pg_dsn, schema=pg_schema)) as again:
            blocking = [m.id for m in again.recall("t1").messages]
        return recalled, used, blocking

    recalled, used, blocking = asyncio.run(main())
    assert recalled == blocking == ["t1-0-0", "t1-0-1"]
    assert used >= 2


def test_each_event_loop_gets_a_pool_of_its_own(storage):
    memory = Memory(storage=storage)
    for n in range(3):
        asyncio.run(memory.asave_messages(_turn("t1", n)))
    assert asyncio.run(memory.arecall("t1", per_page=False)).total == 6


def test_a_loops_pool_is_closed_as_the_loop_shuts_down(storage):
    memory = Memory(storage=storage)

    async def main():
        await memory.asave_messages(_turn("t1", 0))
        return await storage._apools.pool()

    pool = asyncio.run(main())
    assert pool.closed
    assert memory.recall("t1", per_page=False).total == 2


def test_a_loop_shuts_down_while_its_pool_is_still_connecting():
    silent = socket.create_server(("127.0.0.1", 0))  # the kernel accepts, nobody answers
    pools = LoopPools(f"host=127.0.0.1 port={silent.getsockname()[1]} dbname=x user=x", {}, 4, "silent")

    async def main():
        await pools.pool()
        await asyncio.sleep(0.2)  # the first connection attempt now waits for the server

    ended = threading.Event()
    runner = threading.Thread(target=lambda: (asyncio.run(main()), ended.set()), daemon=True)
    runner.start()
    try:
        assert ended.wait(30), "asyncio.run did not return: a pool worker outlived the loop's end"
    finally:
        silent.close()
