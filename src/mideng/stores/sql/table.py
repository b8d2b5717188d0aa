"""The record table as a store capability: "my records live in table T; here are my operations".

A store whose records are rows of a SQL table (SQLStore, SQLiteStore) has a ``record_table``
attribute, a ``RecordTable``. Code that writes records on a connection the store does not own
(the transactional mode, inside the caller's transaction) asks the guard's store for it and runs
the operations it hands out on that connection, for whatever statement kind the connection
speaks (mideng.db.dialect). A store without the attribute keeps its records elsewhere (memory,
Redis, a hybrid's cache in front): there is no table to join a transaction with.
"""

from __future__ import annotations

from mideng.core.record import Claim, ClaimRequest, Record, Ticket
from mideng.db.statements import Op, check_table
from mideng.stores.batch import Completion
from mideng.stores.sql.ops import claim as claim_op
from mideng.stores.sql.ops import complete as complete_op
from mideng.stores.sql.statements import Statements

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
