"""The record table inside a caller's transaction: "my records live in table T; here are my
operations", and a step recorded with the step's own writes.

A store whose records are rows of a SQL table (SQLStore, SQLiteStore) has a ``record_table``
attribute, a ``RecordTable``. Code that writes records on a connection the store does not own
(the transactional mode, inside the caller's transaction) asks the guard's store for it and runs
the operations it hands out on that connection, for whatever statement kind the connection
speaks (mideng.db.dialect). A store without the attribute keeps its records elsewhere (memory,
Redis, a hybrid's cache in front): there is no table to join a transaction with.
``step_transaction`` / ``astep_transaction`` record a multi-step operation's step there too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from mideng.core.record import Claim, ClaimRequest, Record, Ticket
from mideng.db.caller_connection import AsyncSite, site_for
from mideng.db.statements import Op, check_table
from mideng.stores.batch import Completion
from mideng.stores.record_table.ops import claim as claim_op
from mideng.stores.record_table.ops import complete as complete_op
from mideng.stores.record_table.statements import Statements
from mideng.stores.record_table.steps import record_step

# Per (kind, table): statement sets are costly to build and never change.
_STATEMENTS: dict[tuple[str, str], Statements] = {}


class RecordTable:
    """A record table, by name, and its operations on a caller's connection."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = check_table(name)

    def statements(self, kind: str) -> Statements:
        """The statements for a connection of ``kind`` inside the caller's transaction."""
        found = _STATEMENTS.get((kind, self.name))
        if found is None:
            found = Statements(kind, self.name, in_transaction=True)
            _STATEMENTS[(kind, self.name)] = found
        return found

    def claim(self, kind: str, req: ClaimRequest) -> Op[Claim]:
        return claim_op(self.statements(kind), req)

    def complete(
        self,
        kind: str,
        ticket: Ticket,
        result: bytes,
        codec: str,
        ttl: float | None,
        known: Record | None = None,
    ) -> Op[Record]:
        """``known``: the claim's own row, from which the completed one follows."""
        return complete_op(self.statements(kind), Completion(ticket, result, codec, ttl), known)

    def __repr__(self) -> str:
        return f"RecordTable({self.name})"


@contextmanager
def step_transaction(conn: Any, table: RecordTable) -> Iterator[Callable[..., None]]:
    """Run a step inside the caller's transaction on ``conn`` (beginning one when none is
    active, and then committing it); what it yields records the step there, so the record
    commits or rolls back with the step's own writes. ``conn``: a SQLAlchemy ``Connection`` or
    ``Session``, or a Django connection or its alias."""
    site = site_for(conn)
    try:
        # atomic: on an AUTOCOMMIT connection the record would commit apart from the step's
        # writes. Inside the try: a Session whose connection can't be had is not left in the
        # transaction begun for it.
        s = table.statements(site.open(False, atomic=True))
    except BaseException:
        site.rollback(whole=False)
        raise
    try:
        yield lambda *step: site.run(record_step(s, *step))
    except BaseException:
        site.rollback(whole=False)
        raise
    site.commit()


@asynccontextmanager
async def astep_transaction(conn: Any, table: RecordTable) -> AsyncIterator[Any]:
    """``step_transaction`` on an AsyncConnection / AsyncSession; what it yields is awaited."""
    site = AsyncSite(conn)
    try:
        s = table.statements(await site.open(False, atomic=True))
    except BaseException:
        await site.rollback(whole=False)
        raise
    try:
        yield lambda *step: site.run(record_step(s, *step))
    except BaseException:
        await site.rollback(whole=False)
        raise
    await site.commit()
