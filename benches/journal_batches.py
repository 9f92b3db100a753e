"""Apply cost per journalled record against the batch size, and replay time at open.

Run: ``python benches/journal_batches.py``. CPU (``process_time``) and wall time of applying a
batch of journalled one-message saves to DuckDB (``Database.settle``), for batches of 1 to
4,000 records, twice; then the open of a database a killed process left 10,001 journal records
in (they are applied at open), against the open of the same database afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time

from threadrecall import Memory
from threadrecall.storage import DuckDBStorage
from threadrecall.storage.duckdb import database

SIZES = (1, 10, 100, 1000, 4000)

KILLED_WRITER = textwrap.dedent("""
    import os, sys
    from threadrecall import Memory
    from threadrecall.storage import DuckDBStorage
    from threadrecall.storage.duckdb import database
    database.JOURNAL_BYTES = 1 << 40
    memory = Memory(storage=DuckDBStorage(sys.argv[1]))
    memory.create_thread("r", thread_id="t")
    for k in range(10000):
        memory.save_messages([{"id": f"m{k}", "thread_id": "t", "role": "user",
                               "content": f"a turn of a conversation, number {k}"}])
    os._exit(0)  # no close: every record stays in the journal
""")


def batches(folder: str) -> None:
    database.JOURNAL_BYTES = 1 << 40  # applied only when asked
    memory = Memory(storage=DuckDBStorage(os.path.join(folder, "batches.duckdb")))
    memory.create_thread("r", thread_id="t")
    db = memory.storage.db
    db.settle()
    k = 0
    for size in SIZES * 2:
        for _ in range(size):
            memory.save_messages([{"id": f"m{k}", "thread_id": "t", "role": "user",
                                   "content": f"a turn of a conversation, number {k}"}])
            k += 1
        size_bytes = db._journal.size
        cpu, wall = time.process_time(), time.perf_counter()
        db.settle()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        print(f"batch of {size:5d} records ({size_bytes:7d} bytes): apply CPU {cpu * 1e3:7.2f} ms, wall "
              f"{wall * 1e3:7.2f} ms; CPU per record {cpu / size * 1e3:.3f} ms")
    memory.close()


def replay(folder: str) -> None:
    path = os.path.join(folder, "replay.duckdb")
    subprocess.run([sys.executable, "-c", KILLED_WRITER, path], check=True)
    print(f"journal left: {os.path.getsize(path + '.journal')} bytes")
    for what in ("open applying 10,001 journal records", "open of the same database, nothing to apply"):
        cpu, wall = time.process_time(), time.perf_counter()
        storage = DuckDBStorage(path)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        print(f"{what}: CPU {cpu * 1e3:.0f} ms, wall {wall * 1e3:.0f} ms; "
              f"{len(storage.thread_messages('t'))} messages")
        storage.close()


def main() -> None:
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as folder:
        batches(folder)
        replay(folder)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
