"""What every caller-connection site decides the same way, whatever its connection.

A site (mideng.db.caller_connection for SQLAlchemy, mideng.db.django_connection for Django)
runs an operation inside a caller's transaction. Who begins, commits and rolls back follows
from two facts, the same for every kind of connection:

- ``owned``: no transaction is active, so the site begins one and ends it itself;
- ``savepoint``: inside the caller's transaction, the site's work is a savepoint of its own,
  so undoing it leaves the caller's transaction usable.

A site names its connection's own calls (begin a transaction, begin a savepoint, roll back
the caller's whole transaction); each step here returns the call to make, if any, so a
blocking and an awaiting site share the decisions and only make the calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Rules:
    """The state and rules every site shares; each step returns the call to make, if any."""

    def __init__(self, conn: Any, *, owned: bool) -> None:
        self.conn: Any = conn
        self.owned = owned
        self.session = False  # a SQLAlchemy Session; its site says so
        self.begun: Any = None  # the transaction or savepoint the site began, if any
        self.connection: Any = None  # what statements go to
        self.kind = ""

    # The connection's own calls, which each kind of site names. Asked for only when needed:
    # a site is built once per operation, and most never begin anything.
    def _transaction_call(self) -> Callable[[], Any]:
        """Begins a transaction, returning what ends it (``commit``, ``rollback``,
        ``is_active``)."""
        raise NotImplementedError

    def _savepoint_call(self) -> Callable[[], Any]:
        """Begins a savepoint, returning what ends it, as ``_transaction_call``'s does."""
        raise NotImplementedError

    def _callers_rollback(self) -> Callable[[], Any]:
        """Rolls back (or dooms) the caller's whole transaction."""
        raise NotImplementedError

    def _begin(self, savepoint: bool) -> Callable[[], Any] | None:
        if self.owned:
            return self._transaction_call()
        if savepoint:
            return self._savepoint_call()
        return None

    def _after_failed_commit(self) -> Callable[[], Any]:
        # A COMMIT that fails leaves the connection in the dead transaction until someone rolls
        # it back: its next statement is refused, and a pool that does not reset it would hand
        # the dead transaction to the next user. A site that began the transaction rolls the
        # connection itself back; one that began only a savepoint undoes that, and the
        # caller's transaction stays the caller's.
        if self.owned:
            return self._callers_rollback()
        return self.begun.rollback  # type: ignore[no-any-return]

    def _undo(self, whole: bool) -> Callable[[], Any] | None:
        if self.begun is not None:
            return self.begun.rollback if self.begun.is_active else None
        return self._callers_rollback() if whole else None


class BlockingSite(Rules):
    """What a blocking site undoes and restarts the same way, whatever its connection; the
    site opens (``open``) in its own way."""

    def open(self, savepoint: bool, *, atomic: bool = False, left_open: bool = False) -> str:
        raise NotImplementedError

    def rollback(self, *, whole: bool) -> None:
        undo = self._undo(whole)
        if undo is not None:
            undo()

    def restart(self) -> str:
        """The site's own transaction died (a deadlock victim): begin a fresh one."""
        self.rollback(whole=False)
        return self.open(savepoint=False)
