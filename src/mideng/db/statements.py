"""Statements and their results: what a SQL-backed operation yields and what it receives.

An operation is a generator (``Op``): it yields a ``Stmt`` (an ``Sql`` text and its
parameters), receives that statement's ``Res``, and returns its answer. It never touches a
connection, so the same operation runs wherever a driver (mideng.db.drive) is pointed: a store's
own DB-API cursors or a caller's SQLAlchemy connection (mideng.db.caller_connection), sync or async.

Texts are written once with ``:name`` binds and converted up front to the forms the drivers take,
so nothing is rewritten per execution.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from mideng.errors import ConfigurationError

T = TypeVar("T")

_BIND = re.compile(r"(?<![:\w]):(\w+)")
# Unquoted identifiers only: a table name is pasted into SQL text, so nothing else may get
# through. 50 characters leaves room for index suffixes within PostgreSQL's and MySQL's limits.
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,49}$")


def check_table(table: str) -> str:
    """The one rule for a table name anything here pastes into SQL: a plain identifier."""
    if not isinstance(table, str) or not _IDENT.match(table):
        raise ConfigurationError(
            f"table name {table!r} must be a plain SQL identifier (letters, digits, _; at most "
            "50 characters)"
        )
    return table


def binds(text: str) -> list[str]:
    """The ``:name`` binds of a text, in order of appearance."""
    return _BIND.findall(text)


class Sql:
    """One statement text (or several joined by ``;`` when ``sets`` > 1), in every bind style.

    ``text``: ``:name`` binds (SQLAlchemy ``text()``, as ``clause``); ``pyformat``: ``%(name)s``
    (psycopg, PyMySQL, asyncmy with a mapping); ``positional``: ``%s`` in order of appearance,
    for a caller that passes a tuple (the drivers then skip matching names to values), and
    Django's cursor on every backend; ``names``: the binds in that order.
    ``rows``: whether the last statement returns rows.
    """

    __slots__ = ("_clause", "names", "positional", "pyformat", "rows", "sets", "text")

    def __init__(self, text: str, sets: int = 1) -> None:
        self.text = " ".join(text.split())
        self.pyformat = _BIND.sub(r"%(\1)s", self.text)
        self.positional = _BIND.sub("%s", self.text)
        self.names = tuple(binds(self.text))  # the values ``positional`` takes, in order
        self.sets = sets
        # Known up front: asking a psycopg cursor for its description builds column objects,
        # which costs more than the rest of a short statement's client side.
        last = self.text.rsplit(";", 1)[-1].lstrip().upper()
        self.rows = last.startswith(("SELECT", "WITH")) or " RETURNING " in last
        self._clause: Any = None

    @property
    def clause(self) -> Any:
        """The SQLAlchemy ``text()`` construct, built on first use."""
        if self._clause is None:
            from sqlalchemy import text

            self._clause = text(self.text)
        return self._clause

    def __repr__(self) -> str:
        return f"Sql({self.text!r})"


# Tuples rather than dataclasses: one of each per statement, on the hot path.
class Stmt(NamedTuple):
    """A statement to run: its text and its ``:name`` parameters."""

    sql: Sql
    params: Mapping[str, Any] | None = None


class Res(NamedTuple):
    """What a statement answered."""

    rowcount: int  # of the first statement in the text
    rows: Sequence[Sequence[Any]]  # of the last one
    lastrowid: int = 0  # MySQL's OK packet: how an INSERT or UPDATE hands a value back


#: An operation: yields statements, receives their results, returns ``T``.
Op = Generator[Stmt, Res, T]
