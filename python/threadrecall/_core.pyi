"""Type stub of the compiled core module ``threadrecall._core``."""

from collections.abc import Sequence
from typing import Any, TypeAlias, final

__all__ = [
    "__version__",
    "compact_json",
    "stored_messages",
    "validate_metadata_filter",
    "validate_vector_filter",
    "matches_metadata_filter",
    "matches_vector_filter",
    "Timeline",
    "VectorIndex",
    "LexicalIndex",
]

__version__: str

_Row: TypeAlias = tuple[str, str, str | None, int, int, str]
"""A timeline message: (id, thread_id, resource_id, created_at_us, seq, payload)."""

def compact_json(value: Any) -> str | None:
    """Compact JSON text as Python's ``json`` writes it; None when only Python's encoder can."""

def stored_messages(rows: Any, kinds: tuple[Any, Any, Any, Any]) -> list[Any] | None:
    """Stored rows (a list of ``MessageRow`` or ``ColumnRow`` tuples) as ``Message`` objects;
    ``kinds`` is ``(Message, MessageContent, epoch, timedelta)``. None when a JSON text is
    left to Python's decoder (a lone surrogate escape, a text that is not JSON)."""

def validate_metadata_filter(obj: Any) -> None:
    """Check recall's ``filter.metadata``; raise InvalidFilterError or FilterTypeError."""

def validate_vector_filter(obj: Any) -> None:
    """Check a Mongo-style vector filter; raise InvalidFilterError or FilterTypeError."""

def matches_metadata_filter(filter: Any, records: list[dict[str, Any] | None]) -> list[bool]:
    """For each shallow metadata dict, whether it passes recall's metadata filter."""

def matches_vector_filter(filter: Any, records: Sequence[dict[str, Any] | None]) -> list[bool]:
    """For each shallow metadata dict, whether it passes the vector filter."""

@final
class Timeline:
    """In-memory replica of the messages table, ordered per thread by (created_at, seq)."""

    def __new__(cls) -> Timeline: ...
    def __len__(self) -> int: ...
    def upsert(
        self,
        ids: list[str],
        thread_ids: list[str],
        resource_ids: list[str | None],
        created_at: list[int],
        seqs: list[int],
        metadata: list[dict[str, Any] | None] | None,
        payloads: list[str],
        *,
        metadata_json: list[str] | None = None,
    ) -> None:
        """Insert or replace messages by id; created_at in µs since the epoch. Metadata as
        dicts, or as JSON texts in ``metadata_json`` (raises InvalidArgumentError on a text
        that is not JSON)."""
    def remove(self, ids: list[str]) -> int:
        """Remove messages by id; return how many were present."""
    def remove_thread(self, thread_id: str) -> int:
        """Remove every message of a thread; return how many there were."""
    def get(self, id: str) -> _Row | None:
        """The message with this id, or None."""
    def page(
        self,
        thread_id: str,
        *,
        resource_id: str | None = None,
        start: int | None = None,
        start_exclusive: bool = False,
        end: int | None = None,
        end_exclusive: bool = False,
        metadata: dict[str, Any] | None = None,
        descending: bool = False,
        offset: int = 0,
        limit: int | None = None,
        after_id: str | None = None,
        before_id: str | None = None,
    ) -> tuple[list[_Row], int]:
        """One page of a thread's messages and the count of all that pass the filters."""
    def window(
        self, includes: list[tuple[str, int, int]], resource_id: str | None = None
    ) -> list[_Row]:
        """Each (id, before, after) message with its neighbours, de-duplicated, chronological."""
    def adjacent(
        self, ids: list[str], resource_id: str | None = None
    ) -> list[tuple[str | None, str | None]]:
        """For each id, the ids of the messages right before and after it in its thread."""
    def smooth(
        self,
        scores: list[tuple[str, float]],
        weight: float,
        resource_id: str | None = None,
        entrants: list[str] | None = None,
    ) -> list[tuple[str, float]]:
        """Each scored message's score plus ``weight`` times its best direct neighbour's, and
        the same for its unscored neighbours (only those in ``entrants``, when given); best
        first, ties in the order given, then as the neighbours were met."""
    def fuse(
        self,
        lexical: list[tuple[str, float]],
        vector: list[tuple[str, float]],
        side_weight: float,
        lexical_weight: float,
        rrf_k: float,
        final_weight: float,
        resource_id: str | None = None,
        entrants: list[str] | None = None,
        limit: int | None = None,
    ) -> list[tuple[str, float]]:
        """Hybrid ranking, best first: each ranking smoothed by ``side_weight``, the two fused
        by weighted reciprocal rank, that smoothed by ``final_weight``."""

@final
class VectorIndex:
    """HNSW vector index with filter pushdown; many readers, one writer.

    ``metric`` is ``"cosine"``, ``"euclidean"`` or ``"dotproduct"``. Scores are larger when
    closer: cosine similarity, negative L2 distance, or the dot product.
    """

    def __new__(
        cls, dim: int, metric: str = "cosine", m: int = 16, ef_construction: int = 200, seed: int = 0
    ) -> VectorIndex: ...
    def add(
        self,
        ids: list[str],
        vectors: Any,
        metadata: list[dict[str, Any] | None] | None = None,
        *,
        metadata_json: list[str] | None = None,
        link: bool = False,
    ) -> None:
        """Insert or replace by id; ``vectors`` is C-contiguous float32 ``(len(ids), dim)``;
        metadata as dicts, as JSON texts (``metadata_json``), or both (the dicts are read);
        each vector keeps its JSON text, when given, for ``query`` to hand out.

        Searchable at once; linked into the graph by ``link_pending`` (or before returning
        when ``link`` is true).
        """
    def link_pending(self, max_count: int | None = None) -> int:
        """Link up to ``max_count`` (default all) waiting vectors into the graph; return how many."""
    def link_all(self, threads: int, batch: int = 8192, rounds: int | None = None) -> int:
        """Link every waiting vector on ``threads`` threads, in batches linked beside searches
        (at most ``rounds`` batches when given); return how many."""
    def hold_vectors(self, all: bool) -> None:
        """Keep every float vector in memory as well as in its file (``all``), so searches
        read no file; or only while they take at most 16 MiB (the default)."""
    @property
    def pending(self) -> int:
        """How many vectors wait to be linked into the graph."""
    @property
    def outdated(self) -> bool:
        """Whether a save would write more than the changes and linking since the last one:
        a search breadth measured since, or a file of the previous format (or none yet)."""
    def remove(self, ids: list[str]) -> int:
        """Delete by id; return how many existed."""
    def fill_texts(self, ids: list[str], texts: list[str]) -> None:
        """Give each live id that holds no metadata text its text in ``texts``."""
    @property
    def texts_missing(self) -> int:
        """How many live vectors hold no metadata text."""
    def ids_where(self, filter: dict[str, Any]) -> list[str]:
        """The ids whose metadata passes ``filter`` (every id for an empty filter)."""
    def remove_where(self, filter: dict[str, Any]) -> list[str]:
        """Delete every vector whose metadata passes ``filter``; return their ids."""
    def search(
        self, vector: Any, k: int, filter: dict[str, Any] | None = None, ef: int | None = None
    ) -> list[tuple[str, float]]:
        """The ``k`` closest ``(id, score)`` pairs passing ``filter``, closest first."""
    def query(
        self, vector: Any, k: int, filter: dict[str, Any] | None, ef: int | None, *,
        result: type[Any]
    ) -> tuple[list[Any], list[str]]:
        """``search`` as ``result`` objects (``id``, ``score``, and the metadata text the
        hit's vector holds as ``_text`` (UTF-8 bytes), in the instance dict; ``vector`` is left to the
        class's default); also the ids whose vectors hold no text."""
    def search_batch(
        self, vectors: Any, k: int, filter: dict[str, Any] | None = None, ef: int | None = None
    ) -> list[list[tuple[str, float]]]:
        """``search`` for every row of a float32 ``(n, dim)`` array."""
    def default_ef(self, k: int) -> int:
        """The breadth an unfiltered search of ``k`` hits uses when none is given (measured
        on the graph on first use)."""
    def get_vector(self, id: str) -> Any | None:
        """The stored float32 vector (unit length for cosine), read from its file, or None."""
    def save(self, path: str | Any, generation: int, origin: str) -> int:
        """Save to ``path`` and its vectors file (``path`` with the suffix ``.vectors``), tagged
        with the database generation and the index's origin there: append what changed since
        the last save to the files it last wrote, else write both anew (temp files + rename).
        Searches go on meanwhile. Return how many vectors the file holds unlinked."""
    @staticmethod
    def load(path: str | Any) -> tuple[VectorIndex, int, str]:
        """Open an index file and its vectors file (float vectors are read from it as searches
        need them); raise IndexCorruptError if either is damaged or foreign."""
    def memory_bytes(self) -> list[tuple[str, int]]:
        """Estimated resident bytes by part: vectors (those not yet written to the vectors
        file), codes, graph, ids, metadata."""
    def __len__(self) -> int: ...
    def __contains__(self, id: str, /) -> bool: ...
    @property
    def dim(self) -> int: ...
    @property
    def metric(self) -> str: ...

@final
class LexicalIndex:
    """BM25 over message text, searchable by thread or resource."""

    def __new__(cls, *, k1: float = 0.9, b: float = 0.2, stem: bool = True,
                stop_words: bool = True, context: float = 0.7, context_turns: int = 3) -> LexicalIndex: ...
    def __len__(self) -> int: ...
    def upsert(self, ids: list[str], thread_ids: list[str], resource_ids: list[str | None],
               texts: list[str], orders: list[int] | None = None) -> None:
        """Insert or replace messages by id; ``orders`` place them in their threads."""
    def remove(self, ids: list[str]) -> int:
        """Remove messages by id; return how many were present."""
    def remove_thread(self, thread_id: str) -> int:
        """Remove every message of a thread; return how many there were."""
    def search(self, query: str, k: int, *, thread_id: str | None = None,
               resource_id: str | None = None) -> list[tuple[str, float]]:
        """The k best (id, score) pairs, best first, within one thread or one resource."""
    def tokenize(self, text: str) -> list[str]:
        """The terms this index cuts text into."""
