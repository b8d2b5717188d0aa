"""What an operator reads of an outbox: the backlog per destination, pages of rows by keyset,
one row, the rows of one request id. Statement generators (mideng.db) run on a SQLAlchemy
``Engine`` or ``AsyncEngine`` by ``OutboxSurvey``.

Pages follow the primary key (``id``): the thousandth page costs what the first does. The
backlog counts only rows not sent (``state IN (pending, dead)``), so its cost follows the
backlog, not the table, where the database has an index led by ``state`` (SQLite and
MySQL/MariaDB: the ``_unkeyed`` index); on PostgreSQL, whose indexes on the rows table are
partial, it reads the table (docs/dashboard.md has the figures).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from mideng.core.audit import AuditQuery, AuditRow
from mideng.db.caller_connection import aexecute_for, execute_for
from mideng.db.dialect import kind_of
from mideng.db.drive import adrive, drive
from mideng.db.statements import Op, Sql, Stmt, check_table
from mideng.errors import StoreUnavailableError
from mideng.outbox.engines import async_engine, sync_engine
from mideng.schema import audit
from mideng.schema.audit import AuditStatements
from mideng.schema.outbox import DEAD, PENDING, SENT

T = TypeVar("T")

#: Each state's word, as pages show and filters take it.
STATE_NAMES = {PENDING: "pending", SENT: "sent", DEAD: "dead"}
STATE_OF = {name: state for state, name in STATE_NAMES.items()}


class Backlog(NamedTuple):
    """A destination's rows not sent: pending ones and since when, dead ones."""

    destination: str
    pending: int
    oldest_pending: float | None
    dead: int


class Row(NamedTuple):
    """One outbox row as an operator sees it (the payload only on ``row``)."""

    id: str
    destination: str
    key: str | None
    seq: int | None
    state: str
    attempts: int
    error: str | None
    created_at: float
    sent_at: float | None
    request_id: str | None
    type: str
    headers: str
    payload: bytes | None = None


@dataclass(frozen=True, slots=True)
class RowQuery:
    """A page of rows: in ``state`` (a ``STATE_NAMES`` word; None: any), to ``destination``
    (None: any), the ``limit`` after the row ``after`` (its id; None: from the first)."""

    state: str | None = None
    destination: str | None = None
    after: str | None = None
    limit: int = 50


_COLUMNS = (
    "id, destination, aggregateid, seq, state, attempts, last_error, created_at, sent_at, "
    "request_id, type, headers"
)


class Queries:
    """The operator's statements on one outbox table."""

    def __init__(self, table: str) -> None:
        t = check_table(table)
        self.backlog = Sql(
            f"SELECT destination, state, count(*), min(created_at) FROM {t} "
            f"WHERE state IN ({PENDING}, {DEAD}) GROUP BY destination, state"
        )
        self.row = Sql(f"SELECT {_COLUMNS}, payload FROM {t} WHERE id = :id")
        self.with_request_id = Sql(
            f"SELECT {_COLUMNS} FROM {t} WHERE request_id = :request_id ORDER BY id LIMIT :limit"
        )
        self._table = t
        self.audit = AuditStatements(t)
        self._pages: dict[tuple[int | None, bool], Sql] = {}

    def page(self, state: int | None, by_destination: bool) -> Sql:
        """Rows after ``:after`` by id; the state written into the text, as an index sees it."""
        found = self._pages.get((state, by_destination))
        if found is None:
            where = "" if state is None else f" AND state = {state}"
            if by_destination:
                where += " AND destination = :destination"
            found = self._pages[(state, by_destination)] = Sql(
                f"SELECT {_COLUMNS} FROM {self._table} WHERE id > :after{where} "
                "ORDER BY id LIMIT :limit"
            )
        return found


def _row(values: Any) -> Row:
    payload = values[12] if len(values) > 12 else None
    if isinstance(payload, str):  # SQLite keeps a text value written to a BLOB column as text
        payload = payload.encode("utf-8", "surrogatepass")
    return Row(
        str(values[0]),
        str(values[1]),
        values[2],
        None if values[3] is None else int(values[3]),
        STATE_NAMES.get(int(values[4]), str(values[4])),
        int(values[5]),
        values[6],
        float(values[7]),
        None if values[8] is None else float(values[8]),
        values[9],
        str(values[10]),
        str(values[11]),
        None if payload is None else bytes(payload),
    )


def backlog(q: Queries) -> Op[list[Backlog]]:
    """Per destination with rows not sent, the most pending first."""
    res = yield Stmt(q.backlog, {})
    found: dict[str, list[Any]] = {}
    for destination, state, n, oldest in res.rows:
        counts = found.setdefault(str(destination), [0, None, 0])
        if int(state) == PENDING:
            counts[0], counts[1] = int(n), float(oldest)
        else:
            counts[2] = int(n)
    every = [Backlog(name, *counts) for name, counts in found.items()]
    return sorted(every, key=lambda b: (-b.pending, -b.dead, b.destination))


def rows(q: Queries, query: RowQuery) -> Op[list[Row]]:
    state = None if query.state is None else STATE_OF.get(query.state)
    if query.state is not None and state is None:
        raise ValueError(f"no outbox state {query.state!r}")
    params = {"after": query.after or "", "limit": int(query.limit)}
    if query.destination is not None:
        params["destination"] = query.destination
    res = yield Stmt(q.page(state, query.destination is not None), params)
    return [_row(values) for values in res.rows]


def row(q: Queries, row_id: str) -> Op[Row | None]:
    res = yield Stmt(q.row, {"id": row_id})
    return _row(res.rows[0]) if res.rows else None


def with_request_id(q: Queries, request_id: str, limit: int) -> Op[list[Row]]:
    res = yield Stmt(q.with_request_id, {"request_id": request_id, "limit": int(limit)})
    return [_row(values) for values in res.rows]


class OutboxSurvey:
    """The operator's reads of the outbox ``table`` in the database ``db`` (a URL, an
    ``Engine`` or an ``AsyncEngine``), each sync and async: the blocking ones on a sync
    engine, the awaited ones on an async engine of the same database. A database error (it
    is down, the table is not there) is a ``StoreUnavailableError``."""

    def __init__(self, db: Any, table: str) -> None:
        self.db = db
        self.table = table
        self.queries = Queries(table)
        self._engine: Any = None
        self._aengine: Any = None

    @property
    def engine(self) -> Any:
        """The sync ``Engine`` (made on first use from a URL)."""
        if self._engine is None:
            self._engine = sync_engine(self.db)
        return self._engine

    @property
    def aengine(self) -> Any:
        """The ``AsyncEngine`` of the same database (made on first use)."""
        if self._aengine is None:
            self._aengine, _ = async_engine(self.db)
        return self._aengine

    def _run(self, make: Callable[[Queries], Op[T]]) -> T:
        from sqlalchemy.exc import DBAPIError

        try:
            with self.engine.connect() as connection:
                kind = kind_of(connection.dialect)
                return drive(make(self.queries), execute_for(kind), connection)
        except DBAPIError as exc:
            raise StoreUnavailableError(f"the outbox's database: {exc.orig}") from exc

    async def _arun(self, make: Callable[[Queries], Op[T]]) -> T:
        from sqlalchemy.exc import DBAPIError

        try:
            async with self.aengine.connect() as connection:
                kind = kind_of(connection.dialect)
                return await adrive(make(self.queries), aexecute_for(kind), connection)
        except DBAPIError as exc:
            raise StoreUnavailableError(f"the outbox's database: {exc.orig}") from exc

    def backlog(self) -> list[Backlog]:
        return self._run(backlog)

    async def abacklog(self) -> list[Backlog]:
        return await self._arun(backlog)

    def rows(self, query: RowQuery) -> list[Row]:
        return self._run(lambda q: rows(q, query))

    async def arows(self, query: RowQuery) -> list[Row]:
        return await self._arun(lambda q: rows(q, query))

    def row(self, row_id: str) -> Row | None:
        return self._run(lambda q: row(q, row_id))

    async def arow(self, row_id: str) -> Row | None:
        return await self._arun(lambda q: row(q, row_id))

    def with_request_id(self, request_id: str, limit: int = 20) -> list[Row]:
        return self._run(lambda q: with_request_id(q, request_id, limit))

    async def awith_request_id(self, request_id: str, limit: int = 20) -> list[Row]:
        return await self._arun(lambda q: with_request_id(q, request_id, limit))

    def audit_rows(self, query: AuditQuery) -> list[AuditRow]:
        """A page of the outbox's audit table, newest first."""
        return self._run(lambda q: audit.listed(q.audit, query))

    async def aaudit_rows(self, query: AuditQuery) -> list[AuditRow]:
        return await self._arun(lambda q: audit.listed(q.audit, query))

    def close(self) -> None:
        if self._engine is not None and self._engine is not self.db:
            self._engine.dispose()

    async def aclose(self) -> None:
        if self._aengine is not None and self._aengine is not self.db:
            await self._aengine.dispose()


__all__ = ["STATE_NAMES", "Backlog", "OutboxSurvey", "Row", "RowQuery"]
