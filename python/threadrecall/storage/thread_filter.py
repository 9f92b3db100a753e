"""The ``list_threads`` metadata filter: validation and its DuckDB SQL.

Shallow, AND, exact-type equality over a thread's JSON metadata: numbers equal numbers (``1 ==
1.0``), booleans only booleans, strings only strings, and ``None`` only an explicitly stored null,
never a missing key — the same rules as the message filter of ``recall``. The texts of the errors
are the reference's for thread filters, which differ from the message filter's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from ..errors import FilterTypeError, InvalidFilterError

__all__ = ["thread_filter_sql", "validate_thread_filter"]

_KEY = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_RESERVED = frozenset({"__proto__", "prototype", "constructor"})
_MAX_KEY = 128
_INTS = "('BIGINT', 'UBIGINT')"


def validate_thread_filter(metadata: Any) -> dict[str, Any]:
    """Check keys and values; return the filter as a plain dict (empty: no filter)."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise FilterTypeError("Metadata filter must be an object.")
    for key, value in metadata.items():
        if not isinstance(key, str) or key in _RESERVED:
            raise InvalidFilterError(f'Invalid metadata key: "{key}".')
        if not _KEY.match(key):
            raise InvalidFilterError(
                f'Invalid metadata key: "{key}". Keys must start with a letter or underscore and '
                "contain only alphanumeric characters and underscores."
            )
        if len(key) > _MAX_KEY:
            raise InvalidFilterError(f'Metadata key "{key}" exceeds maximum length of 128 characters.')
        if not _is_scalar(value):
            raise InvalidFilterError(
                f'Metadata filter value for key "{key}" must be a scalar type '
                f"(string, number, boolean, or null), got {type(value).__name__}"
            )
    return dict(metadata)


def thread_filter_sql(metadata: Mapping[str, Any], column: str = "metadata") -> tuple[str, list[Any]]:
    """An SQL predicate (and its parameters) for a validated filter."""
    clauses: list[str] = []
    params: list[Any] = []
    for key, value in metadata.items():
        path = f"'$.{key}'"  # the key passed the regex above, so it is safe to inline
        kind = f"json_type({column}, {path})"
        if value is None:
            clauses.append(f"{kind} = 'NULL'")
        elif isinstance(value, bool):
            clauses.append(f"({kind} = 'BOOLEAN' AND json_extract({column}, {path})::BOOLEAN = ?)")
            params.append(value)
        elif isinstance(value, str):
            clauses.append(f"({kind} = 'VARCHAR' AND json_extract_string({column}, {path}) = ?)")
            params.append(value)
        else:  # a number: compared exactly, across int and float
            clauses.append(_number_sql(column, path, value, params))
    return " AND ".join(clauses) or "TRUE", params


def _number_sql(column: str, path: str, value: float, params: list[Any]) -> str:
    """Exact numeric equality, as Python compares ints and floats.

    An integer literal is compared by its text (exact at any size, even past 64 bits, where
    DuckDB types it DOUBLE); a real literal by its double value.
    """
    kind = f"json_type({column}, {path})"
    text = f"json_extract({column}, {path})::VARCHAR"
    int_literal = f"({kind} IN {_INTS} OR ({kind} = 'DOUBLE' AND regexp_full_match({text}, '-?[0-9]+')))"
    real_literal = f"({kind} = 'DOUBLE' AND NOT regexp_full_match({text}, '-?[0-9]+'))"
    options = []
    as_int = value if isinstance(value, int) else (int(value) if value.is_integer() else None)
    if as_int is not None:
        options.append(f"({int_literal} AND {text} = ?)")
        params.append(str(as_int))
    if float(value) == value:  # exactly representable as a double
        options.append(f"({real_literal} AND json_extract({column}, {path})::DOUBLE = ?)")
        params.append(float(value))
    return "(" + " OR ".join(options) + ")" if options else "FALSE"


def _is_scalar(value: Any) -> bool:
    if value is None or isinstance(value, (bool, str, int)):
        return True
    return isinstance(value, float) and math.isfinite(value)
