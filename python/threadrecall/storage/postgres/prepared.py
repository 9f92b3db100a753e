"""Statements prepared by name on a connection and run by libpq directly.

For a read that runs often (recall's page) psycopg's cursor costs about as much client time
as the rest of the call: most of ``execute`` is its own Python. Here the statement is
prepared once per connection under a name derived from its text, executed with
``exec_prepared`` (binary results) and its rows loaded by psycopg's own loaders: the same
round trip, plan and rows for about half the client's work.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import abc, errors
from psycopg.adapt import Transformer
from psycopg.pq import DiagnosticField, ExecStatus, Format

__all__ = ["Named", "named_statement", "run_named", "text_values"]

_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%")
_UNKNOWN_STATEMENT = str(errors.InvalidSqlStatementName.sqlstate).encode()
_DUPLICATE_STATEMENT = str(errors.DuplicatePreparedStatement.sqlstate).encode()


@dataclass
class Named:
    """The statements prepared by name on one connection, the loader that turns their
    binary results into rows (made from the connection's adapters, so that it holds no
    reference to the connection, the key it is kept under), and whether they may run there:
    the connection speaks UTF-8 (the encoding of the values sent and of the texts loaded) and
    prepares statements (``prepare_threshold=None`` turns that off, as for a pooler in
    transaction mode)."""

    loader: abc.Transformer
    usable: bool
    names: set[bytes] = field(default_factory=set)

    @classmethod
    def of(cls, conn: psycopg.Connection) -> Named:
        return cls(Transformer(conn.adapters),
                   conn.info.encoding == "utf-8" and conn.prepare_threshold is not None)


@functools.lru_cache(maxsize=512)
def named_statement(query: str) -> tuple[bytes, bytes, tuple[str, ...]]:
    """``query`` as libpq prepares it: its name (from its digest, so that one text has one
    name on every connection), its text with ``$n`` placeholders, and the parameter names
    in their order (a name used twice is one parameter)."""
    order: list[str] = []

    def number(found: re.Match[str]) -> str:
        key = found.group(1)
        if key is None:
            return "%"
        if key not in order:
            order.append(key)
        return f"${order.index(key) + 1}"

    text = _PLACEHOLDER.sub(number, query).encode()
    return b"threadrecall_" + hashlib.sha1(text).hexdigest().encode(), text, tuple(order)


def text_values(params: Mapping[str, Any], order: tuple[str, ...]) -> list[bytes | None] | None:
    r"""The parameters in ``order`` in PostgreSQL's text form (UTF-8), or ``None`` when one is
    not a string, an ``int``, ``None`` or a list of those (an array), or holds a string that
    libpq cannot pass as it is (a NUL, which would end it) or that UTF-8 cannot hold.

    >>> text_values({"a": "x", "b": 7, "c": None, "d": ['say "hi"', "a\\b", None, 3]}, ("a", "b", "c", "d"))
    [b'x', b'7', None, b'{"say \\"hi\\"","a\\\\b",NULL,3}']
    """
    values: list[bytes | None] = []
    for key in order:
        value = params[key]
        if type(value) is list:
            items = [_array_item(item) for item in value]
            if None in items:
                return None
            value = "{" + ",".join(items) + "}"  # type: ignore[arg-type]
        elif value is None:
            values.append(None)
            continue
        elif type(value) is int:
            value = str(value)
        elif not isinstance(value, str):
            return None
        if "\0" in value:
            return None
        try:
            values.append(value.encode())
        except UnicodeEncodeError:
            return None
    return values


def _array_item(item: Any) -> str | None:
    """An array element in PostgreSQL's text form: a string quoted (its backslashes and quotes
    escaped), an ``int``, ``NULL``; ``None`` for any other value."""
    if isinstance(item, str):
        return '"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if item is None:
        return "NULL"
    if type(item) is int:
        return str(item)
    return None


def run_named(conn: psycopg.Connection, named: Named, query: str,
              values: list[bytes | None]) -> list[tuple[Any, ...]]:
    """The rows of ``query`` run by name on ``conn``, prepared there first when it is not
    yet (again when it was deallocated meanwhile); an error raises as psycopg raises it."""
    name, text, _ = named_statement(query)
    pgconn = conn.pgconn
    for attempt in range(2):
        if name not in named.names:
            made = pgconn.prepare(name, text)
            # Already there: prepared by another storage object sharing this pool's
            # connections (the name is the statement's digest: the same text).
            if made.status != ExecStatus.COMMAND_OK and _sqlstate(made) != _DUPLICATE_STATEMENT:
                raise _error(made)
            named.names.add(name)
        # None is a NULL parameter to libpq (psycopg's own calls pass it), which its stubs omit
        result = pgconn.exec_prepared(name, values, result_format=Format.BINARY)  # type: ignore[arg-type]
        if result.status == ExecStatus.TUPLES_OK:
            loader = named.loader
            loader.set_pgresult(result)
            rows = loader.load_rows(0, result.ntuples, tuple)
            loader.set_pgresult(None)
            return rows
        if attempt == 0 and _sqlstate(result) == _UNKNOWN_STATEMENT:  # DEALLOCATE, DISCARD
            named.names.discard(name)
            continue
        raise _error(result)
    raise AssertionError("unreachable")


def _sqlstate(result: Any) -> bytes | None:
    return result.error_field(DiagnosticField.SQLSTATE)


def _error(result: Any) -> psycopg.Error:
    """The exception psycopg raises for a failed result (of a UTF-8 connection): the class of
    its SQLSTATE, and an ``OperationalError`` for one libpq made itself (no SQLSTATE: the
    connection failed)."""
    if not _sqlstate(result):
        return psycopg.OperationalError(result.get_error_message("utf-8"))
    return errors.error_from_result(result, encoding="utf-8")
