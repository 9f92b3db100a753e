"""Apply cost per journalled record against the batch size, and replay time at open.

Run: ``python benches/journal_batches.py``. CPU (process_time) and wall per apply of a batch
of one-message saves, then the open of a database a killed process left 10,001 journal records
in, against the open of the same database afterwards."""
import os, statistics, subprocess, sys, tempfile, time, textwrap
from threadrecall import Memory
from threadrecall.storage import DuckDBStorage
from threadrecall.storage.duckdb import database

database.JOURNAL_BYTES = 1 << 40
d = tempfile.mkdtemp()
m = Memory(storage=DuckDBStorage(os.path.join(d, "m.duckdb")))
m.create_thread("r", thread_id="t")
db = m.storage.db
k = 0
for size in (1, 10, 100, 1000, 4000, 1, 10, 100, 1000, 4000):
    for _ in range(size):
        m.save_messages([{"id": f"m{k}", "thread_id": "t", "role": "user", "content": f"a turn of a conversation, number {k}"}]); k += 1
    nbytes = db._journal.size
    c, w = time.process_time(), time.perf_counter()
    db.settle()
    c, w = time.process_time() - c, time.perf_counter() - w
    print(f"batch {size:5d} records ({nbytes} bytes): apply cpu {c*1e3:8.2f} ms wall {w*1e3:8.2f} ms; per record cpu {c/size*1e3:.3f} ms")
m.close()
# replay: a process journals 10,000 saves and dies; time the open that applies them
path = os.path.join(d, "replay.duckdb")
script = textwrap.dedent("""
    import os, sys
    from threadrecall import Memory
    from threadrecall.storage import DuckDBStorage
    from threadrecall.storage.duckdb import database
    database.JOURNAL_BYTES = 1 << 40
    m = Memory(storage=DuckDBStorage(sys.argv[1]))
    m.create_thread("r", thread_id="t")
    for k in range(10000):
        m.save_messages([{"id": f"m{k}", "thread_id": "t", "role": "user", "content": f"a turn of a conversation, number {k}"}])
    os._exit(0)
""")
subprocess.run([sys.executable, "-c", script, path], check=True)
print("journal bytes", os.path.getsize(path + ".journal"))
c, w = time.process_time(), time.perf_counter()
s = DuckDBStorage(path)
print(f"open replaying 10,001 records: cpu {(time.process_time()-c)*1e3:.0f} ms wall {(time.perf_counter()-w)*1e3:.0f} ms; messages {len(s.thread_messages('t'))}")
s.close()
c, w = time.process_time(), time.perf_counter()
s = DuckDBStorage(path)
print(f"open of the same database, nothing to replay: cpu {(time.process_time()-c)*1e3:.0f} ms wall {(time.perf_counter()-w)*1e3:.0f} ms")
s.close()
