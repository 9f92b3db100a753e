"""A Mongo-style vector filter compiled to a PostgreSQL condition over a JSONB column.

The filter is first validated by the core's own parser (so a bad filter raises exactly the
error ``HnswVectorStore`` raises), then walked here with the same grammar and translated so
that a row passes in PostgreSQL exactly when the core's evaluator would pass its metadata:

- ``metadata -> key`` is the stored value, SQL ``NULL`` when the key is missing. Equality is
  JSONB equality, which is typed as the core's: numbers compare as exact numerics (``1 = 1.0``),
  a boolean never equals a number, a string only a string, JSON ``null`` only a stored null,
  and an array or object equals no scalar.
- Orderings check the stored type first: numbers against numbers (JSONB numeric order), and
  strings against strings in byte order (``COLLATE "C"``), as the core compares ``str``.
- Negation is pushed down to the atoms (``$ne``, ``$nin``, ``$exists: false`` and a negated
  atom are ``... IS NOT TRUE``), so the three-valued logic of SQL never turns a missing key
  into a wrong answer; positive atoms stay in the plain form an expression index can serve.
- Floats are written with ``float_json``, the encoding ``PgVector`` also stores them with, so
  PostgreSQL's exact numeric comparison orders them as the core orders ``f64`` against ``i64``.

Keys are quoted literals (so ``metadata -> 'thread_id'`` matches an expression index and its
statistics); values are bound parameters. A key may also be held by a stored text column
(``text_key``: the key's value when it is a string, else ``NULL``); then an equality to a
string, or ``$in`` of strings, on that key compares the column instead: the same rows pass,
and a btree on the column serves the search (byte comparisons, and an index-only scan when
the index includes what the search reads).
"""

from __future__ import annotations

import json
from typing import Any

from psycopg import sql

from .. import _core

__all__ = ["compile_filter", "float_json", "text_key", "value_json"]

_TWO_POW_53 = 2.0**53
_I64 = (-(2**63), 2**63 - 1)
_ORDERINGS = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
TRUE, FALSE = sql.SQL("TRUE"), sql.SQL("FALSE")


def float_json(value: float) -> str:
    """JSON text of a finite float whose PostgreSQL numeric orders as the float does against
    every integer: the shortest repr below 2^53 (exact for integral values there), else the
    exact integral value (``.0`` keeps it a float when read back).

    >>> float_json(0.1), float_json(2.0**60)
    ('0.1', '1152921504606846976.0')
    """
    if abs(value) < _TWO_POW_53:
        return repr(value)
    return f"{int(value)}.0"


def value_json(value: Any) -> str:
    """JSON text of one scalar as the filter compares it (ints beyond 64 bits become floats,
    as the core converts them)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, int):
        if _I64[0] <= value <= _I64[1]:
            return str(value)
        return float_json(float(value))
    return float_json(float(value))


def text_key(key: str, column: str = "metadata") -> sql.Composed:
    """The expression of a stored text column holding ``key``: its value when a string, else
    ``NULL`` (so equal to a string exactly when ``column -> key`` is that JSON string).

    >>> print(text_key("resource_id").as_string(None))
    CASE WHEN jsonb_typeof("metadata" -> 'resource_id') = 'string' THEN "metadata" ->> 'resource_id' END
    """
    parts = {"c": sql.Identifier(column), "k": sql.Literal(key)}
    return sql.SQL("CASE WHEN jsonb_typeof({c} -> {k}) = 'string' THEN {c} ->> {k} END").format(**parts)


def compile_filter(filter: Any, column: str = "metadata",
                   text_columns: dict[str, str] | None = None) -> tuple[sql.Composable, list[Any]]:
    """The SQL condition and its parameters for ``filter`` (``None`` or ``{}``: ``TRUE``).

    ``text_columns`` maps keys to the stored columns of their ``text_key``: equalities to
    strings on those keys compare the column.

    Raises what the core raises for a bad filter: ``FilterTypeError`` or ``InvalidFilterError``.

    >>> from psycopg import sql
    >>> cond, params = compile_filter({"n": {"$gte": 2}})
    >>> params
    ['2']
    >>> cond, params = compile_filter({"r": "r1"}, text_columns={"r": "r_key"})
    >>> cond.as_string(None), params
    ('("r_key" = %s::text)', ['r1'])
    """
    if filter is None:
        return TRUE, []
    _core.validate_vector_filter(filter)
    params: list[Any] = []
    return _Compiler(sql.Identifier(column), params, text_columns or {}).document(filter, True), params


class _Compiler:
    """One walk of a validated filter; ``positive`` is False under an odd number of ``$not``."""

    def __init__(self, column: sql.Identifier, params: list[Any], text_columns: dict[str, str]) -> None:
        self.column = column
        self.params = params
        self.text_columns = text_columns

    def document(self, doc: dict[str, Any], positive: bool) -> sql.Composable:
        terms = []
        for key, value in doc.items():
            if key in ("$and", "$or"):
                children = [self.document(d, positive) for d in value]
                conjunction = (key == "$and") == positive
                terms.append(_join(children, conjunction))
            elif key == "$not":
                terms.append(self.document(value, not positive))
            else:
                terms.append(self.field(key, value, positive))
        return _join(terms, positive)

    def field(self, key: str, value: Any, positive: bool) -> sql.Composable:
        if not isinstance(value, dict):
            return self.atom(key, "$eq", value, positive)
        terms = []
        for op, operand in value.items():
            if op == "$not":
                terms.append(self.field(key, operand, not positive))
            else:
                terms.append(self.atom(key, op, operand, positive))
        return _join(terms, positive)

    def atom(self, key: str, op: str, operand: Any, positive: bool) -> sql.Composable:
        """One operator on one key; ``positive=False`` gives its negation."""
        if op == "$ne":
            op, positive = "$eq", not positive
        elif op == "$nin":
            op, positive = "$in", not positive
        elif op == "$exists":
            op, positive = "$exists", operand == positive
        key = _lossy(key)
        if "\x00" in key:  # PostgreSQL text cannot hold NUL, so no stored key has one
            return FALSE if positive else TRUE
        if op == "$exists":
            test = "IS NOT NULL" if positive else "IS NULL"
            return sql.SQL("({} " + test + ")").format(self.value(key))
        cond = self.present(key, op, operand)
        return cond if positive else sql.SQL("({}) IS NOT TRUE").format(cond)

    def present(self, key: str, op: str, operand: Any) -> sql.Composable:
        """The positive form of ``$eq``, ``$in`` or an ordering (``NULL`` for a missing key,
        which a conjunction or disjunction without negations reads as false)."""
        if op == "$eq":
            operand = _lossy(operand)
            if isinstance(operand, str) and "\x00" in operand:
                return FALSE  # no stored string holds NUL
            if isinstance(operand, str) and key in self.text_columns:
                return sql.SQL("({} = {}::text)").format(sql.Identifier(self.text_columns[key]), self.param(operand))
            return sql.SQL("({} = {}::jsonb)").format(self.value(key), self.param(value_json(operand)))
        if op == "$in":
            texts = [value_json(v) for v in map(_lossy, operand) if not (isinstance(v, str) and "\x00" in v)]
            if not texts:
                return FALSE
            strings = [v for v in map(_lossy, operand) if isinstance(v, str) and "\x00" not in v]
            if key in self.text_columns and len(strings) == len(texts):
                return sql.SQL("({} = ANY({}::text[]))").format(sql.Identifier(self.text_columns[key]),
                                                               self.param(strings))
            return sql.SQL("({} = ANY({}::jsonb[]))").format(self.value(key), self.param(texts))
        symbol = _ORDERINGS[op]
        operand = _lossy(operand)
        if isinstance(operand, str):
            if "\x00" in operand:  # t > p + "\0" + rest iff t > p; t < it iff t <= p
                operand = operand.split("\x00", 1)[0]
                symbol = ">" if symbol in (">", ">=") else "<="
            return sql.SQL("(jsonb_typeof({v}) = 'string' AND ({t}) COLLATE \"C\" {op} {p})").format(
                v=self.value(key), t=self.text(key), op=sql.SQL(symbol), p=self.param(operand))
        return sql.SQL("(jsonb_typeof({v}) = 'number' AND {v} {op} {p}::jsonb)").format(
            v=self.value(key), op=sql.SQL(symbol), p=self.param(value_json(operand)))

    def value(self, key: str) -> sql.Composable:
        return sql.SQL("({} -> {})").format(self.column, sql.Literal(key))

    def text(self, key: str) -> sql.Composable:
        return sql.SQL("({} ->> {})").format(self.column, sql.Literal(key))

    def param(self, value: Any) -> sql.Composable:
        self.params.append(value)
        return sql.Placeholder()


def _join(terms: list[sql.Composable], conjunction: bool) -> sql.Composable:
    """``terms`` ANDed (or ORed); none gives the neutral element."""
    if not terms:
        return TRUE if conjunction else FALSE
    if len(terms) == 1:
        return terms[0]
    return sql.SQL("(" + (" AND " if conjunction else " OR ").join(["{}"] * len(terms)) + ")").format(*terms)


def _lossy(value: Any) -> Any:
    """A string as the core reads it: lone surrogates become U+FFFD."""
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return value
