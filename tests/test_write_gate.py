"""Writes first: a recall that starts while a write call runs waits for it; a thread inside a
transaction never waits for its own lock."""

from __future__ import annotations

import threading

from threadrecall import Memory
from threadrecall.embedders import HashEmbedder


class HeldEmbedder(HashEmbedder):
    """Embeds only once ``release`` is set, after saying it started."""

    def __init__(self) -> None:
        super().__init__(dim=16)
        self.started = threading.Event()
        self.release = threading.Event()
        self.release.set()

    def embed(self, texts):
        self.started.set()
        assert self.release.wait(10)
        return super().embed(texts)


def msg(text: str) -> dict:
    return {"thread_id": "t1", "resource_id": "r1", "role": "user", "content": text}


def test_a_recall_started_during_a_write_waits_for_it():
    embedder = HeldEmbedder()
    memory = Memory(embedder=embedder, options={"semantic_recall": {"scope": "thread"}})
    memory.save_messages([msg("first")])
    embedder.started.clear()
    embedder.release.clear()
    writer = threading.Thread(target=memory.save_messages, args=([msg("second")],))
    writer.start()
    assert embedder.started.wait(10)  # the write is under way, held in its embedding
    seen: list[int] = []
    reader = threading.Thread(target=lambda: seen.append(memory.recall("t1").total))
    reader.start()
    reader.join(0.2)
    assert reader.is_alive() and seen == []  # waiting at the gate
    embedder.release.set()
    writer.join(10)
    reader.join(10)
    assert seen == [2]  # it ran after the write, and saw it


def test_reads_inside_a_transaction_never_wait_for_a_write_queued_behind_it():
    memory = Memory()
    memory.save_messages([msg("first")])
    queued = threading.Event()
    with memory.transaction():
        memory.save_messages([msg("inside")])

        def write() -> None:
            queued.set()
            memory.save_messages([msg("outside")])  # waits for the transaction's lock

        other = threading.Thread(target=write)
        other.start()
        assert queued.wait(10)
        other.join(0.1)
        assert memory.recall("t1", per_page=False).total == 2  # returns, with its own write
    other.join(10)
    assert not other.is_alive() and memory.recall("t1", per_page=False).total == 3
