"""LangGraph's long-term store and checkpointer over threadrecall: ``pip install 'threadrecall[langgraph]'``.

``ThreadRecallStore`` (a LangGraph ``BaseStore``) keeps every item as a message of one
resource (``"langgraph-store"`` by default): a namespace is a thread of it, an item a message
of that thread whose id names the namespace and key, whose content holds the value and whose
metadata holds the key and the time of the last put. A put keeps the item's ``created_at``.
With ``index={"dims", "embed", "fields"}`` (or, without it, the memory's own embedder) the
texts at the indexed fields are embedded, one vector per text, into the vector index
``langgraph_store_<dims>`` of the memory's database; each vector's metadata carries the
namespace (``ns.0``, ``ns.1``, ...) and the value's scalar fields (``value.<path>``), so a
search's namespace prefix and ``filter`` are applied inside the HNSW search. An item's score is
its best vector's cosine similarity. A ``batch`` answers its reads first, then writes all its
puts in one transaction.

``ThreadRecallSaver`` (a LangGraph ``BaseCheckpointSaver``) keeps each ``(thread_id,
checkpoint_ns)`` as a thread of one resource (``"langgraph-checkpoints"`` by default) whose
messages are its checkpoints and the pending writes. A checkpoint's message holds the values
of the channels it changed (its ``new_versions``), and its metadata names, for every channel
version it points to, the checkpoint whose message holds that value (itself, its parent's
holder, or for a version its parent does not have, the thread's checkpoint that stored it): a
value is stored once however many checkpoints share it, and a put is one message.
Payloads are the saver's serializer output, base64 in a data part: none of it is embedded.
LangGraph calls ``put`` and ``put_writes`` from background threads; on DuckDB the calls waiting
at the same time share one commit (``DuckDBStorage.grouped``), and each returns once its own
write has committed.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import json
import random
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)
from langgraph.store.base.embed import ensure_embeddings, get_text_at_path, tokenize_path

from .. import _core
from ..errors import InvalidArgumentError, StorageError
from ..memory import Memory
from ..types import Message, parse_time

__all__ = ["ThreadRecallSaver", "ThreadRecallStore"]

_COMPARISONS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
# 100 ns ticks between the Gregorian epoch of UUID timestamps and the Unix epoch.
_UUID_EPOCH = 0x01B21DD213814000


# One encoder for every key (``json.dumps`` with options builds a new one per call).
_KEY_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _key(*parts: Any) -> str:
    return _KEY_ENCODER.encode(parts)


def _now() -> datetime:
    return datetime.now(timezone.utc)


# ----------------------------------------------------------------------------------- store


class ThreadRecallStore(BaseStore):
    """A LangGraph store whose items live in a threadrecall ``Memory``.

    >>> store = ThreadRecallStore(Memory())
    >>> store.put(("users", "u1"), "prefs", {"theme": "dark", "size": 3})
    >>> store.get(("users", "u1"), "prefs").value
    {'theme': 'dark', 'size': 3}
    >>> [i.key for i in store.search(("users",), filter={"size": {"$gte": 2}})]
    ['prefs']
    >>> store.list_namespaces(prefix=("users",))
    [('users', 'u1')]
    """

    def __init__(self, memory: Memory, *, index: IndexConfig | None = None,
                 resource_id: str = "langgraph-store") -> None:
        self.memory = memory
        self.resource_id = resource_id
        self.index_config = dict(index) if index is not None else None
        self.embeddings = None
        self._own_vector = False
        if index is not None:
            self.embeddings = ensure_embeddings(index.get("embed"))
            dims, fields = index["dims"], index.get("fields") or ["$"]
        elif memory.index is not None:
            cached = memory.index.embedder
            self.embeddings = ensure_embeddings(lambda texts: cached.embed(list(texts)).tolist())
            dims, fields = cached.dimension, ["$"]
        if self.embeddings is None:
            return
        self._fields = [(path, path if path == "$" else tokenize_path(path)) for path in fields]
        if memory.vector is None:
            from ..vector import HnswVectorStore

            memory.vector, self._own_vector = HnswVectorStore(memory.storage), True
        self.vector = memory.vector
        self.vector_index = f"langgraph_store_{dims}"
        self.vector.create_index(self.vector_index, dims, "cosine")

    def close(self) -> None:
        """Close the vector store this store opened (the memory's own is left to it)."""
        if self._own_vector:
            self.vector.close()
            self.memory.vector, self._own_vector = None, False

    # -- batches

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the reads of ``ops`` (on the state before the batch), then all its puts in one
        transaction; results in the order of ``ops``."""
        ops = list(ops)
        puts = _last_puts(ops)
        embeddings = self.embeddings
        if embeddings is None:
            return self._run(ops, {}, puts, self._embed_puts(puts, None))
        vectors = {q: embeddings.embed_query(q) for q in self._queries(ops)}
        return self._run(ops, vectors, puts, self._embed_puts(puts, embeddings.embed_documents))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """The async twin of ``batch``: embeddings through the embedder's async calls."""
        ops = list(ops)
        puts = _last_puts(ops)
        embeddings = self.embeddings
        if embeddings is None:
            return await asyncio.to_thread(self._run, ops, {}, puts, self._embed_puts(puts, None))
        queries = self._queries(ops)
        vectors = dict(zip(queries, await asyncio.gather(*map(embeddings.aembed_query, queries))))
        texts = [t for op in puts.values() for t in self._texts(op)]
        embedded = iter(await embeddings.aembed_documents(texts) if texts else [])
        writes = self._embed_puts(puts, lambda batch: [next(embedded) for _ in batch])
        return await asyncio.to_thread(self._run, ops, vectors, puts, writes)

    def _run(self, ops: list[Op], vectors: Mapping[str, Sequence[float]],
             puts: Mapping[tuple[tuple[str, ...], str], PutOp],
             writes: Mapping[tuple[tuple[str, ...], str], list[Sequence[float]]]) -> list[Result]:
        results: list[Result] = [None] * len(ops)
        gets = [(i, op) for i, op in enumerate(ops) if isinstance(op, GetOp)]
        if gets:
            found = {m.id: m for m in self.memory.get_messages(
                [_item_id(op.namespace, op.key) for _, op in gets])}
            for i, get in gets:
                message = found.get(_item_id(get.namespace, get.key))
                results[i] = _item(message) if message is not None else None
        for i, any_op in enumerate(ops):
            if isinstance(any_op, SearchOp):
                results[i] = self._search(any_op, vectors.get(any_op.query) if any_op.query else None)
            elif isinstance(any_op, ListNamespacesOp):
                results[i] = self._list_namespaces(any_op)
        if puts:
            self._write(puts, writes)
        return results

    # -- reads

    def _queries(self, ops: list[Op]) -> list[str]:
        if self.embeddings is None:
            return []
        return list(dict.fromkeys(op.query for op in ops if isinstance(op, SearchOp) and op.query))

    def _search(self, op: SearchOp, query: Sequence[float] | None) -> list[SearchItem]:
        prefix = [{f"ns.{i}": part} for i, part in enumerate(op.namespace_prefix)]
        terms = _value_filter(op.filter or {})
        if query is None:
            return self._scan(op, terms)
        where = {"$and": prefix + terms} if prefix or terms else None
        need = op.offset + op.limit
        if need <= 0:
            return []
        k = need
        while True:  # an item has one vector per indexed text: fetch until `need` distinct items
            pairs = self.vector.search_ids(self.vector_index, query, top_k=k, filter=where)
            best: dict[str, float] = {}
            for vid, score in pairs:
                best.setdefault(vid.rsplit("#", 1)[0], score)
            if len(best) >= need or len(pairs) < k:
                break
            k *= 2
        chosen = list(best.items())[op.offset:need]
        found = {m.id: m for m in self.memory.get_messages([i for i, _ in chosen])}
        return [_search_item(found[i], score) for i, score in chosen if i in found]

    def _scan(self, op: SearchOp, terms: list[dict[str, Any]]) -> list[SearchItem]:
        """Items of the namespaces under the prefix that pass the filter, oldest namespace and
        item first (no query: nothing to rank by)."""
        where = {"$and": terms} if terms else None
        out: list[SearchItem] = []
        need = op.offset + op.limit
        for namespace, thread_id in self._namespaces():
            if namespace[:len(op.namespace_prefix)] != tuple(op.namespace_prefix):
                continue
            messages = self.memory.recall(thread_id, per_page=False).messages
            if where is not None:
                keep = _core.matches_vector_filter(where, [_flat(_value(m)) for m in messages])
                messages = [m for m, ok in zip(messages, keep) if ok]
            out.extend(_search_item(m, None) for m in messages)
            if len(out) >= need:
                break
        return out[op.offset:need]

    def _namespaces(self) -> list[tuple[tuple[str, ...], str]]:
        threads = self.memory.list_threads(resource_id=self.resource_id, per_page=False,
                                           order_by={"field": "created_at", "direction": "ASC"})
        prefix = _NS_THREAD
        return [(tuple(json.loads(t.id[len(prefix):])), t.id) for t in threads.threads
                if t.id.startswith(prefix)]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        names = [ns for ns, _ in self._namespaces()
                 if all(_matches(c.match_type, c.path, ns) for c in op.match_conditions or ())]
        if op.max_depth is not None:
            names = list({ns[:op.max_depth] for ns in names})
        return sorted(names)[op.offset:op.offset + op.limit]

    # -- writes

    def _texts(self, op: PutOp) -> list[str]:
        if self.embeddings is None or op.value is None or op.index is False:
            return []
        fields = self._fields if op.index is None else [(p, tokenize_path(p)) for p in op.index]
        return [text for _, path in fields for text in get_text_at_path(op.value, path)]

    def _embed_puts(self, puts: Mapping[tuple[tuple[str, ...], str], PutOp],
                    embed: Any) -> dict[tuple[tuple[str, ...], str], list[Sequence[float]]]:
        texts = {k: self._texts(op) for k, op in puts.items()}
        flat = [t for ts in texts.values() for t in ts]
        vectors = iter(embed(flat) if flat else [])
        return {k: [next(vectors) for _ in ts] for k, ts in texts.items()}

    def _write(self, puts: Mapping[tuple[tuple[str, ...], str], PutOp],
               writes: Mapping[tuple[tuple[str, ...], str], list[Sequence[float]]]) -> None:
        now = _now().isoformat()
        with self.memory.transaction(lock=_NS_THREAD + self.resource_id):
            ids = {k: _item_id(*k) for k in puts}
            old = self.memory.get_messages(list(ids.values()))
            stale = [f"{m.id}#{n}" for m in old for n in range(m.metadata.get("vectors", 0))]
            if stale:
                self.vector.delete_vectors(self.vector_index, ids=stale)
            gone = [ids[k] for k, op in puts.items() if op.value is None]
            if gone:
                self.memory.delete_messages(gone)
            kept = [(k, op) for k, op in puts.items() if op.value is not None]
            self.memory.save_messages([{
                "id": ids[k], "thread_id": _ns_thread(k[0]), "resource_id": self.resource_id,
                "role": "user", "type": "langgraph.item",
                "content": {"parts": [{"type": "data", "value": dict(op.value or {})}]},
                "metadata": {"namespace": list(k[0]), "key": k[1], "updated_at": now,
                             "vectors": len(writes.get(k, ()))},
            } for k, op in kept])
            self._index(kept, ids, writes)
            for namespace in self._emptied(puts, {m.id for m in old}):
                self.memory.delete_thread(_ns_thread(namespace))

    def _emptied(self, puts: Mapping[tuple[tuple[str, ...], str], PutOp], existed: set[str]) -> list[tuple[str, ...]]:
        """The namespaces a batch's deletes leave without items (their threads go too)."""
        change: dict[tuple[str, ...], int] = {}
        for (namespace, key), op in puts.items():
            was = _item_id(namespace, key) in existed
            change[namespace] = change.get(namespace, 0) + (op.value is not None) - was
        return [ns for ns, delta in change.items()
                if delta < 0 and self.memory.recall(_ns_thread(ns), per_page=1).total + delta <= 0]

    def _index(self, kept: list[tuple[tuple[tuple[str, ...], str], PutOp]], ids: Mapping[Any, str],
               writes: Mapping[tuple[tuple[str, ...], str], list[Sequence[float]]]) -> None:
        vids, vectors, metadata = [], [], []
        for k, op in kept:
            base = {**{f"ns.{i}": part for i, part in enumerate(k[0])}, **_flat(op.value or {})}
            for n, vector in enumerate(writes.get(k, ())):
                vids.append(f"{ids[k]}#{n}")
                vectors.append(vector)
                metadata.append(base)
        if vids:
            self.vector.upsert(self.vector_index, vectors, ids=vids, metadata=metadata)


_NS_THREAD = "langgraph-store:"


def _ns_thread(namespace: tuple[str, ...]) -> str:
    return _NS_THREAD + _KEY_ENCODER.encode(list(namespace))


def _item_id(namespace: tuple[str, ...], key: str) -> str:
    return "langgraph-item:" + _key(list(namespace), key)


def _value(message: Message) -> dict[str, Any]:
    return dict(message.content.parts[0]["value"])


def _item(message: Message) -> Item:
    return Item(**_item_fields(message))


def _search_item(message: Message, score: float | None) -> SearchItem:
    return SearchItem(**_item_fields(message), score=score)


def _item_fields(message: Message) -> dict[str, Any]:
    meta = message.metadata
    return dict(value=_value(message), key=meta["key"], namespace=tuple(meta["namespace"]),
                created_at=message.created_at, updated_at=parse_time(meta["updated_at"]))


def _last_puts(ops: list[Op]) -> dict[tuple[tuple[str, ...], str], PutOp]:
    puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
    for op in ops:
        if isinstance(op, PutOp):
            puts.pop((op.namespace, op.key), None)
            puts[(op.namespace, op.key)] = op
    return puts


def _flat(value: Mapping[str, Any], path: str = "value") -> dict[str, Any]:
    """The scalar fields of a value, nested ones under dotted paths: what filters select on."""
    out: dict[str, Any] = {}
    for key, v in value.items():
        field = f"{path}.{key}"
        if isinstance(v, Mapping):
            out.update(_flat(v, field))
        elif v is None or isinstance(v, (str, bool, int)) or (isinstance(v, float) and v == v
                                                               and abs(v) != float("inf")):
            out[field] = v
    return out


def _value_filter(flt: Mapping[str, Any], path: str = "value") -> list[dict[str, Any]]:
    """A LangGraph filter (exact values, nested objects, ``$eq $ne $gt $gte $lt $lte``) as
    terms of the core's vector filter over ``_flat`` fields."""
    terms: list[dict[str, Any]] = []
    for key, want in flt.items():
        field = f"{path}.{key}"
        if isinstance(want, Mapping) and any(str(k).startswith("$") for k in want):
            unknown = set(want) - set(_COMPARISONS)
            if unknown:
                raise InvalidArgumentError(f"unsupported filter operator(s): {', '.join(sorted(unknown))}")
            terms.append({field: dict(want)})
        elif isinstance(want, Mapping):
            terms.extend(_value_filter(want, field))
        elif isinstance(want, (list, tuple)):
            raise InvalidArgumentError(f"filter on {key!r}: list values cannot be matched")
        else:
            terms.append({field: {"$eq": want}})
    return terms


def _matches(kind: str, path: Sequence[str], namespace: tuple[str, ...]) -> bool:
    if len(namespace) < len(path):
        return False
    pairs = zip(namespace, path) if kind == "prefix" else zip(reversed(namespace), reversed(path))
    if kind not in ("prefix", "suffix"):
        raise InvalidArgumentError(f"unsupported namespace match type: {kind!r}")
    return all(p == "*" or n == p for n, p in pairs)


# ----------------------------------------------------------------------------------- saver


class ThreadRecallSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer whose checkpoints live in a threadrecall ``Memory``.

    >>> from langgraph.graph import StateGraph
    >>> builder = StateGraph(int)
    >>> _ = builder.add_node("add_one", lambda x: x + 1)
    >>> _ = builder.set_entry_point("add_one").set_finish_point("add_one")
    >>> graph = builder.compile(checkpointer=ThreadRecallSaver(Memory()))
    >>> graph.invoke(1, {"configurable": {"thread_id": "t1"}})
    2
    >>> graph.get_state({"configurable": {"thread_id": "t1"}}).values
    2
    """

    def __init__(self, memory: Memory, *, resource_id: str = "langgraph-checkpoints",
                 serde: Any = None) -> None:
        super().__init__(serde=serde)
        self.memory = memory
        self.resource_id = resource_id

    # -- reads

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config``, or the thread's latest, with its pending writes."""
        thread_id, ns = _thread_of(config)
        tid = _cp_thread(thread_id, ns)
        checkpoint_id = get_checkpoint_id(config)
        if checkpoint_id:
            found = self.memory.get_messages([_cp_id(thread_id, ns, checkpoint_id)])
        else:
            found = self.memory.recall(tid, per_page=1, filter={"metadata": {"kind": "checkpoint"}}).messages
        return self._tuple(thread_id, ns, found[0]) if found else None

    def list(self, config: RunnableConfig | None, *, filter: Mapping[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by checkpoint id) within each thread and namespace."""
        before_id = get_checkpoint_id(before) if before else None
        only_id = get_checkpoint_id(config) if config else None
        for thread_id, ns in self._threads(config):
            found = self.memory.recall(_cp_thread(thread_id, ns), per_page=False,
                                       filter={"metadata": {"kind": "checkpoint"}}).messages
            for message in sorted(found, key=lambda m: m.metadata["checkpoint_id"], reverse=True):
                cid = message.metadata["checkpoint_id"]
                if (only_id and cid != only_id) or (before_id and cid >= before_id):
                    continue
                part = message.content.parts[0]
                if filter:
                    metadata = self.serde.loads_typed(_typed(part["metadata"]))
                    if not all(metadata.get(k) == v for k, v in filter.items()):
                        continue
                if limit is not None and limit <= 0:
                    return
                if limit is not None:
                    limit -= 1
                yield self._tuple(thread_id, ns, message)

    def _threads(self, config: RunnableConfig | None) -> builtins.list[tuple[str, str]]:
        if config is not None and config["configurable"].get("checkpoint_ns") is not None:
            return [_thread_of(config)]
        metadata = {"thread_id": str(config["configurable"]["thread_id"])} if config else None
        threads = self.memory.list_threads(resource_id=self.resource_id, metadata=metadata,
                                           per_page=False)
        return [(t.metadata["thread_id"], t.metadata["checkpoint_ns"]) for t in threads.threads]

    def _tuple(self, thread_id: str, ns: str, message: Message) -> CheckpointTuple:
        part = message.content.parts[0]
        cid, parent = message.metadata["checkpoint_id"], message.metadata["parent_checkpoint_id"]
        checkpoint = self.serde.loads_typed(_typed(part["checkpoint"]))
        values = {ch: self.serde.loads_typed(typed)
                  for ch, typed in self._values(thread_id, ns, message, checkpoint["channel_versions"])
                  if typed[0] != "empty"}
        writes = self.memory.recall(_cp_thread(thread_id, ns), per_page=False, filter={
            "metadata": {"kind": "write", "checkpoint_id": cid}}).messages
        writes.sort(key=lambda m: writes_sort_key(m.metadata["task_path"], m.metadata["task_id"],
                                                  m.metadata["idx"]))

        def at(checkpoint_id: str) -> RunnableConfig:
            return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                     "checkpoint_id": checkpoint_id}}

        return CheckpointTuple(
            config=at(cid),
            checkpoint=cast(Checkpoint, {**checkpoint, "channel_values": values}),
            metadata=self.serde.loads_typed(_typed(part["metadata"])),
            parent_config=at(parent) if parent else None,
            pending_writes=[(w.metadata["task_id"], w.metadata["channel"],
                             self.serde.loads_typed(_typed(w.content.parts[0]["value"]))) for w in writes],
        )

    # -- writes

    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Store a checkpoint and the channel values of ``new_versions``, in one transaction."""
        thread_id, ns = _thread_of(config)
        tid = _cp_thread(thread_id, ns)
        stored: dict[str, Any] = dict(checkpoint)
        values = stored.pop("channel_values", {}) or {}
        parent = config["configurable"].get("checkpoint_id")
        holders = self._holders(thread_id, ns, parent, checkpoint["id"], checkpoint["channel_versions"],
                                new_versions)
        message = {
            "id": _cp_id(thread_id, ns, checkpoint["id"]), "thread_id": tid, "resource_id": self.resource_id,
            "role": "assistant",
            "type": "langgraph.checkpoint", "created_at": _uuid_time(checkpoint["id"]),
            "metadata": {"kind": "checkpoint", "checkpoint_id": checkpoint["id"],
                         "parent_checkpoint_id": parent, "holders": holders},
            "content": {"parts": [{"type": "data",
                                   "checkpoint": _b64(self.serde.dumps_typed(stored)),
                                   "metadata": _b64(self.serde.dumps_typed(
                                       get_checkpoint_metadata(config, metadata))),
                                   "values": {ch: _b64(self.serde.dumps_typed(values[ch]) if ch in values
                                                       else ("empty", b"")) for ch in new_versions}}]},
        }

        def write() -> None:
            with self.memory.transaction():
                self._ensure_thread(tid, thread_id, ns)
                self.memory.save_messages([message])

        self._commit(write)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                 "checkpoint_id": checkpoint["id"]}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """Store a task's writes for a checkpoint; a regular write already stored is kept,
        a special one (error, interrupt, ...) replaced."""
        thread_id, ns = _thread_of(config)
        tid = _cp_thread(thread_id, ns)
        cid = config["configurable"]["checkpoint_id"]
        rows = []
        for n, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, n)
            rows.append((idx, channel, value, _write_id(thread_id, ns, cid, task_id, idx)))
        stored = [{
            "id": wid, "thread_id": tid, "resource_id": self.resource_id, "role": "assistant",
            "type": "langgraph.write",
            "metadata": {"kind": "write", "checkpoint_id": cid, "task_id": task_id, "idx": idx,
                         "channel": channel, "task_path": task_path},
            "content": {"parts": [{"type": "data", "value": _b64(self.serde.dumps_typed(value))}]},
        } for idx, channel, value, wid in rows]
        regular = {wid for idx, _, _, wid in rows if idx >= 0}

        def write() -> None:
            with self.memory.transaction(lock=tid):
                have = {m.id for m in self.memory.get_messages(list(regular))} if regular else set()
                self._ensure_thread(tid, thread_id, ns)
                self.memory.save_messages([m for m in stored if m["id"] not in have])

        self._commit(write)

    def _holders(self, thread_id: str, ns: str, parent: str | None, checkpoint_id: str,
                 versions: ChannelVersions, new_versions: ChannelVersions) -> dict[str, Any]:
        """``{channel: [version, id of the checkpoint holding it]}`` for a new checkpoint: the
        versions of ``new_versions`` it holds itself; the others are where its parent found
        them (LangGraph's ``new_versions`` are the channels changed since the parent), or,
        for a version the parent does not point to, in the thread's checkpoint that stored it.
        A version stored nowhere is left out (its channel has no value, as with LangGraph's
        own savers)."""
        holders = {ch: [v, checkpoint_id] for ch, v in new_versions.items()}
        wanted = {ch: v for ch, v in versions.items() if holders.get(ch, [None])[0] != v}
        if not wanted:
            return holders
        if parent:
            _take_holders(wanted, holders, self.memory.get_messages([_cp_id(thread_id, ns, parent)]))
        if wanted:  # a version the parent does not point to: look through the thread
            _take_holders(wanted, holders, self.memory.recall(
                _cp_thread(thread_id, ns), per_page=False, filter={"metadata": {"kind": "checkpoint"}}).messages)
        return holders

    def _values(self, thread_id: str, ns: str, message: Message,
                versions: ChannelVersions) -> Iterator[tuple[str, tuple[str, bytes]]]:
        """The stored value of each channel version of a checkpoint's message, as the
        serializer's ``(type, bytes)``: from the checkpoints its ``holders`` name."""
        holders = _holders_of(message)
        named = {(ch, v): holders[ch][1] for ch, v in versions.items() if ch in holders and holders[ch][0] == v}
        others = {cid for cid in named.values() if cid != message.metadata["checkpoint_id"]}
        rows = {m.metadata["checkpoint_id"]: m for m in self.memory.get_messages(
            [_cp_id(thread_id, ns, cid) for cid in others])}
        rows[message.metadata["checkpoint_id"]] = message
        for (ch, v), cid in named.items():
            holder = rows.get(cid)
            if holder is None:  # deleted since (with its thread)
                continue
            stored = holder.content.parts[0].get("values", {}).get(ch)
            if stored is not None and _holders_of(holder).get(ch, [None])[0] == v:
                yield ch, _typed(stored)

    def _commit(self, write: Any) -> None:
        """Run a write now, or, on a backend that groups the commits of concurrent writes
        (DuckDB), together with the writes of LangGraph's other background threads; either
        way it has committed when this returns."""
        grouped = getattr(self.memory.storage, "grouped", None)
        if grouped is None:
            write()
        else:
            grouped(write)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of a thread, in all its namespaces."""
        with self.memory.transaction():
            for t in self.memory.list_threads(resource_id=self.resource_id, per_page=False,
                                              metadata={"thread_id": str(thread_id)}).threads:
                self.memory.delete_thread(t.id)

    def _ensure_thread(self, tid: str, thread_id: str, ns: str) -> None:
        if self.memory.get_thread_by_id(tid) is None:
            self.memory.create_thread(self.resource_id, thread_id=tid,
                                      metadata={"thread_id": thread_id, "checkpoint_ns": ns})

    def get_next_version(self, current: str | int | None, channel: None = None) -> str:
        """``"<32-digit counter>.<random>"``: increasing, and unique across concurrent writers."""
        number = 0 if current is None else current if isinstance(current, int) else int(current.split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- async twins

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config: RunnableConfig | None, *, filter: Mapping[str, Any] | None = None,
                    before: RunnableConfig | None = None,
                    limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for item in found:
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]],
                          task_id: str, task_path: str = "") -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)


def _thread_of(config: Mapping[str, Any]) -> tuple[str, str]:
    configurable = config.get("configurable") or {}
    if configurable.get("thread_id") in (None, ""):
        raise InvalidArgumentError("the config needs configurable.thread_id")
    return str(configurable["thread_id"]), configurable.get("checkpoint_ns") or ""


def _cp_thread(thread_id: str, ns: str) -> str:
    return "langgraph-checkpoints:" + _key(thread_id, ns)


def _holders_of(checkpoint: Message) -> dict[str, Any]:
    """A checkpoint message's ``holders``; ``StorageError`` for one this saver cannot read."""
    holders = checkpoint.metadata.get("holders")
    if not isinstance(holders, dict):
        raise StorageError(
            f"the checkpoint {checkpoint.metadata.get('checkpoint_id')!r} of {checkpoint.thread_id} was "
            "stored by an earlier ThreadRecallSaver (one message per channel value), which this one "
            "does not read: finish or delete that thread with the earlier version")
    return holders


def _take_holders(wanted: dict[str, Any], holders: dict[str, list[Any]], checkpoints: list[Message]) -> None:
    """Move the channel versions of ``wanted`` that these checkpoints' messages know the
    holder of into ``holders``."""
    for message in checkpoints:
        known = _holders_of(message)
        for ch, v in list(wanted.items()):
            if ch in known and known[ch][0] == v:
                holders[ch] = known[ch]
                del wanted[ch]


def _cp_id(thread_id: str, ns: str, checkpoint_id: str) -> str:
    return "langgraph-checkpoint:" + _key(thread_id, ns, checkpoint_id)


def _write_id(thread_id: str, ns: str, checkpoint_id: str, task_id: str, idx: int) -> str:
    return "langgraph-write:" + _key(thread_id, ns, checkpoint_id, task_id, idx)


def _b64(typed: tuple[str, bytes]) -> list[str]:
    return [typed[0], base64.b64encode(typed[1]).decode("ascii")]


def _typed(stored: Sequence[str]) -> tuple[str, bytes]:
    return stored[0], base64.b64decode(stored[1])


def _uuid_time(checkpoint_id: str) -> datetime:
    """The time in a version-6 (or 1) UUID, so the latest checkpoint is the one with the
    greatest id; now for any other id."""
    try:
        u = uuid.UUID(checkpoint_id)
    except (ValueError, AttributeError, TypeError):
        return _now()
    if u.version == 6:
        ticks = ((u.int >> 80) << 12) | ((u.int >> 64) & 0x0FFF)
    elif u.version == 1:
        ticks = u.time
    else:
        return _now()
    return datetime.fromtimestamp((ticks - _UUID_EPOCH) / 1e7, tz=timezone.utc)
