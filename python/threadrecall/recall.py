"""The history half of ``Memory.recall``: a page of a thread merged with included messages.

Everything here reads through the storage protocol's ``page`` and ``window``: on DuckDB the
in-memory replica answers them (a binary search in the Rust core, not a database query), on
PostgreSQL one indexed query each.
The rules follow the reference: the newest ``per_page`` messages when no order is given
(queried newest-first, returned oldest-first), filters applied before ``total`` and paging,
includes exempt from filters and not counted, the result de-duplicated and chronological.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, cast

from .config import is_count
from .errors import InvalidArgumentError
from .storage.base import Storage
from .storage.rows import ColumnRow, MessageRow, messages_of, to_micros
from .types import Message, RecallResult, check_name, parse_time

__all__ = ["Include", "HistoryQuery", "read_history", "check_thread_id", "owned_page", "owned_window",
           "owner_of", "parse_includes", "thread_rows"]


@dataclass(frozen=True)
class Include:
    """A message to bring in with ``before``/``after`` neighbours from its own thread."""

    id: str
    before: int = 0
    after: int = 0


@dataclass(frozen=True)
class HistoryQuery:
    thread_id: str
    resource_id: str | None
    per_page: int | bool
    page: int
    date_range: Mapping[str, Any] | None
    metadata: Mapping[str, Any] | None
    order_by: Mapping[str, Any] | None
    after_id: str | None = None
    before_id: str | None = None


_ORDER = itemgetter(3, 4)  # (created_at, seq): a thread's order

# The largest position a page may reach (``page * per_page``): beyond it offsets overflow.
MAX_POSITION = 2**53


def check_thread_id(thread_id: Any) -> str:
    if not isinstance(thread_id, str) or not thread_id.strip():
        raise InvalidArgumentError("threadId must be a non-empty string")
    return check_name(thread_id, "threadId")


def check_paging(page: Any, per_page: Any) -> None:
    if not is_count(page):
        raise InvalidArgumentError("page must be >= 0")
    if per_page is not False and per_page is not None and not is_count(per_page):
        raise InvalidArgumentError("perPage must be >= 0")
    size = per_page if is_count(per_page) else 1
    if page * max(size, 1) > MAX_POSITION or size > MAX_POSITION:
        raise InvalidArgumentError(
            f"page {page} of {size} is too large: page * per_page must be at most 2**53")


def parse_includes(include: Any, default_context: int) -> list[Include]:
    """Validate caller includes: ``[{"id", "thread_id"?, "with_previous_messages"?, ...}]``."""
    if include is None:
        return []
    if not isinstance(include, Sequence) or isinstance(include, (str, bytes)):
        raise InvalidArgumentError("include must be a list of {'id': ...} entries")
    out = []
    for entry in include:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("id"), str) or not entry["id"]:
            raise InvalidArgumentError("each include entry needs a non-empty string 'id'")
        check_name(entry["id"], "an include id")
        before = entry.get("with_previous_messages", default_context)
        after = entry.get("with_next_messages", default_context)
        if not (is_count(before) and is_count(after)):
            raise InvalidArgumentError(
                "with_previous_messages and with_next_messages must be non-negative integers"
            )
        out.append(Include(entry["id"], before, after))
    return out


def date_bounds(date_range: Mapping[str, Any] | None) -> dict[str, Any]:
    """Translate ``filter.date_range`` into the timeline's µs bounds."""
    if not date_range:
        return {}
    if not isinstance(date_range, Mapping):
        raise InvalidArgumentError("filter.date_range must be a mapping")
    unknown = set(date_range) - {"start", "end", "start_exclusive", "end_exclusive"}
    if unknown:
        raise InvalidArgumentError(f"unknown filter.date_range key(s): {', '.join(sorted(unknown))}")
    bounds: dict[str, Any] = {}
    for side in ("start", "end"):
        value = date_range.get(side)
        if value is not None:
            try:
                when = parse_time(value)
            except (TypeError, ValueError, OverflowError, OSError) as exc:
                raise InvalidArgumentError(f"filter.date_range.{side}: {exc}") from None
            bounds[side] = to_micros(when)
            bounds[f"{side}_exclusive"] = bool(date_range.get(f"{side}_exclusive", False))
    return bounds


def read_history(storage: Storage, q: HistoryQuery, includes: Sequence[Include],
                 check_owner: Callable[[str | None], None] | None = None,
                 freshness: Any = None) -> RecallResult:
    """One page of a thread plus its includes, with ``total`` and ``has_more``.

    ``check_owner``, when given, is called with the resource of the thread (``None`` when there
    is no such thread) before anything is read but the includes, or the page when there are
    none: it comes with the first of them in one read where the storage can (its
    ``owned_window`` or ``owned_page``). A vector store's ``freshness`` check, when given, is
    run in the read of the includes (see ``owned_window``).
    """
    resource = q.resource_id or None  # an empty resource id leaves the page unscoped
    bounds = date_bounds(q.date_range)
    filtered = bool(bounds) or bool(q.metadata)
    descending = _descending(q.order_by, q.per_page)
    empty = q.per_page is not False and q.per_page == 0
    wanted = [(i.id, i.before, i.after) for i in includes]
    if freshness is not None or (check_owner is not None and (includes or empty)):
        owner, window = owned_window(storage, q.thread_id, wanted, resource, freshness)
        if check_owner is not None:
            check_owner(owner)
            check_owner = None
    else:
        window = storage.window(wanted, resource) if includes else []

    if empty:
        return _result(window, [], 0, q.page, 0, False)

    if q.after_id is not None or q.before_id is not None:
        return _cursor_page(storage, q, bounds, window, check_owner)

    limit = None if q.per_page is False else q.per_page
    offset = 0 if q.per_page is False else q.page * q.per_page
    rows, total = owned_page(
        storage, q.thread_id, check_owner, resource_id=resource, metadata=q.metadata or None,
        descending=descending, offset=offset, limit=limit, **bounds,
    )
    if q.per_page is False:
        has_more = False
    else:
        shown = len(rows) if q.metadata else q.per_page
        has_more = offset + shown < total
        if has_more and window:
            on_page = {r[0] for r in rows}
            extra = [r for r in window if r[1] == q.thread_id and r[0] not in on_page]
            if filtered and extra:
                passing = _passing(storage, q, bounds, [r[0] for r in extra])
                extra = [r for r in extra if r[0] in passing]
            has_more = len(rows) + len(extra) < total
    return _result(window, rows, total, q.page, q.per_page, has_more, newest_first=descending)


def thread_rows(storage: Storage, thread_id: str, check_owner: Callable[[str | None], None] | None = None,
                *, resource_id: str | None = None,
                metadata: Mapping[str, Any] | None = None) -> list[MessageRow]:
    """Every row of a thread (passing ``metadata``), oldest first, undecoded: what a recall
    with ``per_page=False`` decodes, for a caller that keeps objects built from earlier reads
    and decodes only the rows that changed since.

    >>> from threadrecall import Memory
    >>> from threadrecall.storage import DuckDBStorage
    >>> storage = DuckDBStorage()
    >>> _ = Memory(storage=storage).save_messages([{"id": f"m{i}", "thread_id": "t1", "resource_id": "u",
    ...     "role": "user", "content": f"message {i}"} for i in range(3)])
    >>> [r[0] for r in thread_rows(storage, "t1")]
    ['m0', 'm1', 'm2']
    """
    rows, _ = owned_page(storage, thread_id, check_owner, resource_id=resource_id or None,
                         metadata=metadata or None, descending=False)
    # a ColumnRow (PostgreSQL) begins with the fields of a MessageRow
    return cast(list[MessageRow], sorted(rows, key=_ORDER))


def owned_page(storage: Storage, thread_id: str, check_owner: Callable[[str | None], None] | None,
               **query: Any) -> tuple[Sequence[MessageRow | ColumnRow], int]:
    """``storage.page(thread_id, **query)``, calling ``check_owner`` first (when given) with the
    resource of the thread (``None`` when there is no such thread): in the same statement
    where the storage has ``owned_page`` (PostgreSQL, whose rows come as ``ColumnRow``), else
    after ``owner_of`` the thread.

    >>> from threadrecall import Memory
    >>> from threadrecall.storage import DuckDBStorage
    >>> storage = DuckDBStorage()
    >>> _ = Memory(storage=storage).save_messages([{"id": f"m{i}", "thread_id": "t1", "resource_id": "u",
    ...     "role": "user", "content": f"message {i}"} for i in range(4)])
    >>> owners = []
    >>> rows, total = owned_page(storage, "t1", owners.append, descending=True, limit=2)
    >>> owners, [r[0] for r in rows], total
    (['u'], ['m3', 'm2'], 4)
    """
    fused = getattr(storage, "owned_page", None)
    if fused is not None:
        return fused(thread_id, check_owner, **query)
    if check_owner is not None:
        check_owner(owner_of(storage, thread_id))
    return storage.page(thread_id, **query)


def owned_window(storage: Storage, thread_id: str, includes: Sequence[tuple[str, int, int]],
                 resource_id: str | None,
                 freshness: Any = None) -> tuple[str | None, list[MessageRow]]:
    """The resource of thread ``thread_id`` (``None`` when there is no such thread) and
    ``storage.window(includes, resource_id)``: one statement where the storage has
    ``owned_window`` (PostgreSQL), else ``owner_of`` the thread and the window. A
    ``freshness`` check (``HnswVectorStore.search_ids_deferred``) runs in that statement; a
    storage without ``owned_window`` leaves it unobserved, so it does not hold.

    >>> from threadrecall import Memory
    >>> from threadrecall.storage import DuckDBStorage
    >>> storage = DuckDBStorage()
    >>> _ = Memory(storage=storage).save_messages([{"id": f"m{i}", "thread_id": "t1", "resource_id": "u",
    ...     "role": "user", "content": f"message {i}"} for i in range(4)])
    >>> owner, rows = owned_window(storage, "t1", [("m2", 1, 0)], None)
    >>> owner, [r[0] for r in rows]
    ('u', ['m1', 'm2'])
    >>> owned_window(storage, "nope", [], None)
    (None, [])
    """
    fused = getattr(storage, "owned_window", None)
    if fused is not None:
        if freshness is not None:
            return fused(thread_id, includes, resource_id, freshness=freshness)
        return fused(thread_id, includes, resource_id)
    return owner_of(storage, thread_id), (storage.window(includes, resource_id) if includes else [])


def owner_of(storage: Storage, thread_id: str) -> str | None:
    """The resource of thread ``thread_id`` (``None`` when there is no such thread): from the
    storage's ``owner`` where it has one (DuckDB, which needs no query), else a thread lookup.

    >>> from threadrecall import Memory
    >>> from threadrecall.storage import DuckDBStorage
    >>> memory = Memory(storage=DuckDBStorage())
    >>> _ = memory.create_thread("u", thread_id="t1")
    >>> owner_of(memory.storage, "t1"), owner_of(memory.storage, "nope")
    ('u', None)
    """
    owner = getattr(storage, "owner", None)
    if owner is not None:
        return owner(thread_id)
    thread = storage.get_thread(thread_id)
    return None if thread is None else thread.resource_id


def _cursor_page(storage: Storage, q: HistoryQuery, bounds: dict[str, Any],
                 window: list[MessageRow],
                 check_owner: Callable[[str | None], None] | None = None) -> RecallResult:
    """``per_page`` messages right after ``after_id`` or right before ``before_id``.

    ``total`` counts the messages (passing the filters) on the cursor's side, so ``has_more``
    says whether another page lies beyond this one in the same direction.
    """
    if q.per_page is False:
        raise InvalidArgumentError("cursor paging needs an integer per_page")
    rows, total = owned_page(
        storage, q.thread_id, check_owner, resource_id=q.resource_id or None, metadata=q.metadata or None,
        limit=q.per_page, after_id=q.after_id, before_id=q.before_id, **bounds,
    )
    return _result(window, rows, total, 0, q.per_page, total > q.per_page)


def _passing(storage: Storage, q: HistoryQuery, bounds: dict[str, Any], ids: list[str]) -> set[str]:
    """Which of ``ids`` (messages of the queried thread) pass the call's filters."""
    rows, _ = storage.page(
        q.thread_id, resource_id=q.resource_id or None, metadata=q.metadata or None, **bounds,
    )
    wanted = set(ids)
    return {r[0] for r in rows if r[0] in wanted}


def _descending(order_by: Mapping[str, Any] | None, per_page: int | bool) -> bool:
    if order_by is None:
        return per_page is not False  # newest-first, then re-sorted chronologically
    if not isinstance(order_by, Mapping):
        raise InvalidArgumentError("order_by must be a mapping like {'field': 'created_at', 'direction': 'DESC'}")
    field = order_by.get("field", "created_at")
    direction = str(order_by.get("direction", "DESC")).upper()
    if field != "created_at" or direction not in ("ASC", "DESC"):
        raise InvalidArgumentError(
            f"order_by must be {{'field': 'created_at', 'direction': 'ASC' | 'DESC'}}, got {dict(order_by)!r}"
        )
    return direction == "DESC"


def _result(window: Sequence[MessageRow], rows: Sequence[MessageRow | ColumnRow], total: int, page: int,
            per_page: int | bool, has_more: bool, *, newest_first: bool = False) -> RecallResult:
    """The messages of a page (in the order asked of ``page``: ``newest_first`` or oldest
    first, as the storage returns it) and of the window, de-duplicated, oldest first."""
    ordered: Sequence[MessageRow | ColumnRow]
    if window:
        merged = {r[0]: r for r in rows}
        for r in window:
            merged.setdefault(r[0], r)
        ordered = sorted(merged.values(), key=_ORDER)
    else:
        ordered = rows[::-1] if newest_first else rows
    messages: list[Message] = messages_of(ordered)
    return RecallResult(messages, total, page, per_page, has_more)

