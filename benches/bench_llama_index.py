"""Per-turn cost of the threadrecall chat stores next to LlamaIndex's SimpleChatStore.

Run: ``pytest benches/bench_llama_index.py --benchmark-only --benchmark-group-by=group``.

Two turns, each on a key already holding 20 turns (40 messages) and growing by the same fixed
number of rounds for every backend:

- ``store``: what ``ChatMemoryBuffer`` asks of its chat store in one chat turn: read the key's
  messages, then add the user message and the reply;
- ``engine``: one ``SimpleChatEngine.chat`` with LlamaIndex's ``MockLLM`` and a
  ``ChatMemoryBuffer`` over the store.

Backends: ``ThreadRecallChatStore`` on a DuckDB file; ``SimpleChatStore`` (LlamaIndex's own).
"""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import MockLLM
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.storage.chat_store import SimpleChatStore
from threadrecall import Memory
from threadrecall.integrations.llama_index import ThreadRecallChatStore
from threadrecall.storage import DuckDBStorage

ROUNDS = 200
HISTORY = [m for i in range(20) for m in (
    ChatMessage(role="user", content=f"Question {i}: what is the weather in city {i}?"),
    ChatMessage(role="assistant", content=f"It is sunny in city {i}."))]
BACKENDS = ["threadrecall-duckdb-file", "simple"]


@pytest.fixture
def store(request, tmp_path):
    if request.param == "simple":
        made = SimpleChatStore()
        made.set_messages("bench", list(HISTORY))
        yield made
        return
    memory = Memory(storage=DuckDBStorage(tmp_path / "llama.duckdb"))
    made = ThreadRecallChatStore(memory)
    made.set_messages("bench", HISTORY)
    yield made
    memory.close()


@pytest.mark.benchmark(group="llama-index: chat store turn")
@pytest.mark.parametrize("store", BACKENDS, indirect=True)
def test_store_turn(benchmark, store):
    counter = itertools.count()

    def turn():
        i = next(counter)
        seen = store.get_messages("bench")
        store.add_message("bench", ChatMessage(role="user", content=f"New question {i}"))
        store.add_message("bench", ChatMessage(role="assistant", content=f"New answer {i}"))
        return seen

    benchmark.pedantic(turn, rounds=ROUNDS, warmup_rounds=5)
    assert len(store.get_messages("bench")) == len(HISTORY) + 2 * (ROUNDS + 5)


@pytest.mark.benchmark(group="llama-index: SimpleChatEngine turn")
@pytest.mark.parametrize("store", BACKENDS, indirect=True)
def test_engine_turn(benchmark, store):
    buffer = ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key="bench", token_limit=100_000,
                                            tokenizer_fn=str.split)
    engine = SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=8), memory=buffer)
    counter = itertools.count()

    reply = benchmark.pedantic(lambda: engine.chat(f"Question {next(counter)}"), rounds=ROUNDS, warmup_rounds=5)
    assert str(reply)
    assert len(store.get_messages("bench")) == len(HISTORY) + 2 * (ROUNDS + 5)
