"""The vector indexes ``compare_vectors.py`` measures, behind one small interface.

Each library is a class with the same methods: ``build`` (bulk insert, graph linked when it
returns), ``set_ef`` (the search breadth), ``query`` (one vector, one call), ``batch`` (many
vectors in one call, or ``None`` when the library has no such call), ``prepare`` and
``filtered`` (its own filtered search, or ``None``), ``save`` and ``load`` (for the memory
runs, each in a fresh interpreter). Every library runs on one thread (threadrecall's linking
too, unless given more), with M = 16 links and a construction breadth of 200.

threadrecall is driven only through its public API (``HnswVectorStore.create_index``,
``upsert``, ``query`` with metadata filters, ``link``); its search breadth is the store's
``ef_search`` setting, which the sweep changes between passes. Peers are optional: a library
that is not installed is skipped.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

M = 16
EF_CONSTRUCTION = 200
INDEX = "bench"


class Threadrecall:
    """threadrecall's ``HnswVectorStore`` over a DuckDB file, through its public API."""

    name = "threadrecall"
    has_batch = False
    hold_vectors = False  # the store's setting: its float vectors in memory too

    def __init__(self, dim: int, workdir: Path, threads: int = 1) -> None:
        from threadrecall.vector import HnswVectorStore

        self.dim = dim
        workdir.mkdir(parents=True, exist_ok=True)
        self.path = workdir / "threadrecall.duckdb"
        self.store = HnswVectorStore(str(self.path), m=M, ef_construction=EF_CONSTRUCTION, threads=threads,
                                     hold_vectors=self.hold_vectors)
        self.store.create_index(INDEX, dim, "cosine")

    def upsert(self, data: np.ndarray, metas: list[dict]) -> None:
        """The bulk write: vectors are stored and searchable, linking goes on in the background."""
        self.store.upsert(INDEX, data, ids=[str(i) for i in range(len(data))], metadata=metas)

    def link(self) -> None:
        self.store.link(INDEX)

    def set_ef(self, ef: int | None) -> None:
        self.store.ef_search = ef

    def query(self, q: np.ndarray, k: int, where: dict | None = None) -> list[int]:
        return [int(r.id) for r in self.store.query(INDEX, q, top_k=k, filter=where)]

    def close(self) -> None:
        self.store.close()

    @classmethod
    def load(cls, path: str, dim: int) -> Any:
        from threadrecall.vector import HnswVectorStore

        store = HnswVectorStore(path, m=M, ef_construction=EF_CONSTRUCTION, hold_vectors=cls.hold_vectors)
        store.query(INDEX, np.ones(dim, dtype=np.float32), top_k=10)  # loads the index file
        return store

    @staticmethod
    def search_all(store: Any, queries: np.ndarray, k: int) -> None:
        for q in queries:
            store.query(INDEX, q, top_k=k)


class ThreadrecallHeld(Threadrecall):
    """The same store with ``hold_vectors=True``: a re-rank reads its float vectors from memory."""

    name = "threadrecall, vectors held"
    hold_vectors = True


class Hnswlib:
    """hnswlib's ``Index`` (inner product over unit vectors, i.e. cosine)."""

    name = "hnswlib"
    has_batch = True

    def __init__(self, dim: int) -> None:
        import hnswlib

        self.index = hnswlib.Index(space="ip", dim=dim)
        self.dim = dim

    def build(self, data: np.ndarray) -> None:
        self.index.init_index(max_elements=len(data), M=M, ef_construction=EF_CONSTRUCTION, random_seed=0)
        self.index.set_num_threads(1)
        self.index.add_items(data, np.arange(len(data)), num_threads=1)

    def set_ef(self, ef: int) -> None:
        self.index.set_ef(ef)

    def query(self, q: np.ndarray, k: int) -> list[int]:
        return self.index.knn_query(q, k=k, num_threads=1)[0][0].tolist()

    def batch(self, queries: np.ndarray, k: int) -> np.ndarray:
        return self.index.knn_query(queries, k=k, num_threads=1)[0]

    def prepare(self, members: np.ndarray) -> Any:
        return set(members.tolist()).__contains__

    def filtered(self, q: np.ndarray, k: int, allowed: Any) -> list[int]:
        labels, _ = self.index.knn_query(q, k=min(k, self.index.get_current_count()),
                                         num_threads=1, filter=allowed)
        return labels[0].tolist()

    def save(self, path: str) -> None:
        self.index.save_index(path)

    @staticmethod
    def load(path: str, dim: int) -> Any:
        import hnswlib

        index = hnswlib.Index(space="ip", dim=dim)
        index.load_index(path)
        index.set_num_threads(1)
        index.knn_query(np.ones(dim, dtype=np.float32), k=10, num_threads=1)
        return index

    @staticmethod
    def search_all(index: Any, queries: np.ndarray, k: int) -> None:
        for q in queries:
            index.knn_query(q, k=k, num_threads=1)


class _Faiss:
    """A faiss HNSW index over inner product (cosine on unit vectors)."""

    has_batch = True

    def __init__(self, dim: int) -> None:
        import faiss

        faiss.omp_set_num_threads(1)
        self.faiss = faiss
        self.dim = dim
        self.index = self.make(faiss, dim)
        self.index.hnsw.efConstruction = EF_CONSTRUCTION
        self.params = None

    def build(self, data: np.ndarray) -> None:
        if not self.index.is_trained:
            self.index.train(data)
        self.index.add(data)

    def set_ef(self, ef: int) -> None:
        self.index.hnsw.efSearch = ef
        self.ef = ef

    def query(self, q: np.ndarray, k: int) -> list[int]:
        return self.index.search(q[None, :], k)[1][0].tolist()

    def batch(self, queries: np.ndarray, k: int) -> np.ndarray:
        return self.index.search(queries, k)[1]

    def prepare(self, members: np.ndarray) -> Any:
        return self.faiss.IDSelectorBatch(members.astype(np.int64))

    def filtered(self, q: np.ndarray, k: int, allowed: Any) -> list[int]:
        params = self.faiss.SearchParametersHNSW(sel=allowed, efSearch=self.ef)
        return [i for i in self.index.search(q[None, :], k, params=params)[1][0].tolist() if i >= 0]

    def save(self, path: str) -> None:
        self.faiss.write_index(self.index, path)

    @staticmethod
    def load(path: str, dim: int) -> Any:
        import faiss

        faiss.omp_set_num_threads(1)
        index = faiss.read_index(path)
        index.search(np.ones((1, dim), dtype=np.float32), 10)
        return index

    @staticmethod
    def search_all(index: Any, queries: np.ndarray, k: int) -> None:
        for q in queries:
            index.search(q[None, :], k)


class FaissFlat(_Faiss):
    name = "faiss HNSWFlat"

    @staticmethod
    def make(faiss: Any, dim: int) -> Any:
        return faiss.IndexHNSWFlat(dim, M, faiss.METRIC_INNER_PRODUCT)


class FaissSQ8(_Faiss):
    name = "faiss HNSWSQ8"

    @staticmethod
    def make(faiss: Any, dim: int) -> Any:
        return faiss.IndexHNSWSQ(dim, faiss.ScalarQuantizer.QT_8bit, M, faiss.METRIC_INNER_PRODUCT)


class _Usearch:
    """A usearch ``Index`` (cosine), vectors stored as ``dtype``."""

    has_batch = True

    def __init__(self, dim: int) -> None:
        from usearch.index import Index

        self.dim = dim
        self.index = Index(ndim=dim, metric="cos", dtype=self.dtype, connectivity=M,
                           expansion_add=EF_CONSTRUCTION)

    def build(self, data: np.ndarray) -> None:
        self.index.add(np.arange(len(data)), data, threads=1)

    def set_ef(self, ef: int) -> None:
        self.index.expansion_search = ef

    def query(self, q: np.ndarray, k: int) -> list[int]:
        return self.index.search(q, k, threads=1).keys.tolist()

    def batch(self, queries: np.ndarray, k: int) -> np.ndarray:
        return self.index.search(queries, k, threads=1).keys

    prepare = None  # usearch's Python search takes no filter
    filtered = None

    def save(self, path: str) -> None:
        self.index.save(path)

    @staticmethod
    def load(path: str, dim: int) -> Any:
        from usearch.index import Index

        index = Index.restore(path)
        index.search(np.ones(dim, dtype=np.float32), 10, threads=1)
        return index

    @staticmethod
    def search_all(index: Any, queries: np.ndarray, k: int) -> None:
        for q in queries:
            index.search(q, k, threads=1)


class UsearchF32(_Usearch):
    name = "usearch f32"
    dtype = "f32"


class UsearchI8(_Usearch):
    name = "usearch i8"
    dtype = "i8"


PEERS = [Hnswlib, FaissFlat, FaissSQ8, UsearchF32, UsearchI8]
LOADERS = {cls.name: cls.load for cls in [Threadrecall, ThreadrecallHeld, *PEERS]}
# What the memory run searches with once loaded: pages touched by searches count too.
QUERIERS = {cls.name: cls.search_all for cls in [Threadrecall, ThreadrecallHeld, *PEERS]}


def available() -> tuple[list[type], list[str]]:
    """The peer classes whose library imports, and a note for each one skipped."""
    found, skipped = [], []
    modules = {Hnswlib: "hnswlib", FaissFlat: "faiss", FaissSQ8: "faiss", UsearchF32: "usearch.index",
               UsearchI8: "usearch.index"}
    for cls in PEERS:
        try:
            __import__(modules[cls])
        except ImportError:
            skipped.append(f"{cls.name}: not installed (`pip install -e '.[bench]'`)")
            continue
        found.append(cls)
    return found, skipped


def rss_bytes() -> int:
    """This process's resident set size, from ``/proc/self/status``."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def temporary_dir() -> Path:
    return Path(tempfile.mkdtemp(prefix="compare-vectors-", dir=os.environ.get("TMPDIR")))
