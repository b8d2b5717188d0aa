"""Transactional mode: the record commits, or rolls back, with the caller's own writes.

    with engine.connect() as conn:
        with guard.transaction(conn, "pay_notify", notify.trade_no, payload=notify) as tx:
            if tx.replayed:
                return tx.result
            conn.execute(orders.update()...)
            tx.set_result({"order": order_id})

The record row is inserted on the caller's connection, inside the caller's transaction, before
the body runs. A concurrent duplicate blocks on the row until this transaction ends: after a
commit it replays the stored result, after a rollback it claims the key itself. The business
writes and the stored result commit together or not at all, so there is no window in which the
work is done but unrecorded, or recorded but undone.

On PostgreSQL, MySQL/MariaDB and SQLite, through SQLAlchemy (``Connection`` or ``Session``;
``AsyncConnection`` or ``AsyncSession`` with ``atransaction``) or Django (a connection or its
alias, inside or outside ``transaction.atomic()``; see docs/django.md). The table is the
record table of the guard's store (a store that keeps its records in SQL says so with
``record_table``, see mideng.stores.record_table), or ``table=``; it must exist
(``mideng schema --apply``). Statements run on the caller's connection through
mideng.db.caller_connection, which also decides who commits; see docs/transactions.md.
"""

from __future__ import annotations

from typing import Any, TypeVar

from mideng.core import effects
from mideng.core.effects import Effects, either
from mideng.core.flow import RAISE, RETURN, RUN, Call
from mideng.core.record import ExpiryPolicy, Record, Ticket
from mideng.db.caller_connection import AsyncSite, Site, site_for
from mideng.db.dialect import retryable
from mideng.db.django_connection import DjangoSite
from mideng.errors import ConfigurationError
from mideng.guard.driver import Driver
from mideng.observability import logs, transactional
from mideng.observability.transactional import Block
from mideng.stores.record_table import RecordTable

T = TypeVar("T")
_UNSET: Any = object()
# A claim that loses a deadlock in a transaction the block began itself is simply run again.
CLAIM_RETRIES = 3


class Tx:
    """What the block sees: whether this is a replay, the stored result, and a place for its own.

    ``replayed``: a previous transaction with this key committed; ``result`` is its stored
    result (decoded with the guard's codec) and the block should return it without writing.
    Otherwise the block does its writes and may call ``set_result``; leaving the block without
    it stores None.
    """

    __slots__ = ("_value", "key", "record", "replayed", "result", "scope", "ticket")

    def __init__(
        self,
        scope: str,
        key: str,
        *,
        replayed: bool,
        result: Any = None,
        record: Record | None = None,
        ticket: Ticket | None = None,
    ) -> None:
        self.scope = scope
        self.key = key
        self.replayed = replayed
        self.result = result
        self.record = record
        self.ticket = ticket
        self._value: Any = _UNSET

    def set_result(self, value: Any) -> None:
        if self.replayed:
            raise ConfigurationError(
                f"{self.scope}:{self.key} is a replay; its result was stored by the first run"
            )
        self._value = value

    @property
    def value(self) -> Any:
        return None if self._value is _UNSET else self._value

    def __repr__(self) -> str:
        state = "replayed" if self.replayed else "acquired"
        return f"Tx({self.scope}:{self.key}, {state})"


def _untyped() -> Any:
    """Stands in for a body in Guard.prepare; the result's type comes from ``result_type``."""


def _record_table(guard: Driver, table: str | None) -> RecordTable:
    """``table=`` if given, else the guard's store's own record table: the capability a store
    has only when its records are rows of a SQL table."""
    if table is not None:
        return RecordTable(table)
    found = getattr(guard.store, "record_table", None)
    if isinstance(found, RecordTable):
        return found
    raise ConfigurationError(
        f"transactional mode needs the record table, and {type(guard.store).__name__} keeps its "
        "records outside SQL: use a Guard over a SQL or SQLite store, or pass table="
    )


def _call(
    guard: Driver, scope: str, key: str, payload: Any, result_type: Any, options: dict[str, Any]
) -> Call:
    call = guard.prepare(scope, key, _untyped, payload, guard.policy(scope, **options))
    call.type_hint = result_type
    return call


def _decided(guard: Driver, call: Call, claim: Any) -> Tx | float:
    """The block's Tx, or seconds to wait before claiming again; raises for refusals."""
    action = call.next(claim)
    if action is RUN:
        return Tx(call.scope, call.key, replayed=False, record=claim.record, ticket=call.ticket)
    logs.duplicate(call)
    if action is RETURN:
        return Tx(call.scope, call.key, replayed=True, result=call.value, record=call.record)
    if action is RAISE:
        raise call.error
    return call.delay


# What a transactional block asks of its site is written once, as procedures of effects
# (mideng.core.effects) on the site: a Site's blocking methods when effects.run carries them
# out, an AsyncSite's coroutines when effects.arun does.
AnySite = Site | DjangoSite | AsyncSite


def _deadlocked(exc: BaseException) -> bool:
    # The driver's error inside SQLAlchemy's (its ``orig``) or Django's (its cause).
    return retryable(getattr(exc, "orig", None) or exc.__cause__ or exc)


def _refuse_external_effects(call: Call, site: AnySite) -> None:
    """A scope with external effects (``on_expiry="unknown"``) is not claimed inside a Django
    caller's atomic block: the claim would roll back with the block while the effect stays
    done, and a retry would run it again."""
    inside = isinstance(site, DjangoSite) and not site.owned
    if inside and call.policy.on_expiry is ExpiryPolicy.UNKNOWN:
        raise ConfigurationError(
            f"scope {call.scope!r} declares external effects (on_expiry='unknown'), and this "
            "claim would be made inside the caller's transaction.atomic() block: it would roll "
            "back with the block while the effect stays done, so a retry would run the effect "
            "again. Claim it where it commits on its own (guard.run or @guard.idempotent on "
            "the guard's store), outside the atomic block"
        )


def _rollback(site: AnySite, whole: bool) -> Effects[None]:
    # The exception that got us here is the one the caller must see: a rollback that fails too
    # (the connection died with it) is logged, not raised over it.
    try:
        yield either(site.rollback, whole=whole)
    except Exception as exc:
        logs.rollback_failed(exc)


def _run(site: AnySite, seen: Block | None, kind: str, operation: str, op: Any) -> Effects[Any]:
    """One statement of the block: observed (timed, its failure counted, a child span) while
    metrics or tracing are on."""
    if seen is None:
        return (yield either(site.run, op))
    with seen.statement(kind, operation):
        return (yield either(site.run, op))


def _enter(
    guard: Driver,
    call: Call,
    records: RecordTable,
    site: AnySite,
    savepoint: bool,
    seen: Block | None,
) -> Effects[tuple[str, Tx]]:
    """Open the block and claim its key: the statement kind and the block's Tx."""
    try:
        kind = yield either(site.open, savepoint, atomic=True)
        attempt = 0
        while True:
            try:
                claim = yield from _run(
                    site, seen, kind, "claim", records.claim(kind, call.request())
                )
                if seen is not None:
                    seen.claimed(call, claim)
                outcome = _decided(guard, call, claim)
            except Exception as exc:
                if not (site.owned and _deadlocked(exc) and attempt < CLAIM_RETRIES):
                    raise
                attempt += 1
                kind = yield either(site.restart)
                continue
            if isinstance(outcome, Tx):
                return kind, outcome
            yield effects.pause(outcome)
    except BaseException:
        yield from _rollback(site, whole=False)  # a refusal never aborts the caller's transaction
        raise


def _leave(
    site: AnySite,
    records: RecordTable,
    kind: str,
    call: Call,
    tx: Tx,
    failed: bool,
    seen: Block | None,
) -> Effects[None]:
    """After the block: store its result and commit, or roll back what it did."""
    if failed:
        yield from _rollback(site, whole=not tx.replayed)
        return
    if not tx.replayed:
        assert tx.ticket is not None
        policy = call.policy
        try:  # an unencodable result rolls back too: nothing of the block may commit unrecorded
            data = policy.codec.encode(tx.value)
            ttl, codec = policy.ttl, policy.codec.name
            done = records.complete(kind, tx.ticket, data, codec, ttl, tx.record)
            yield from _run(site, seen, kind, "complete", done)
        except BaseException:
            yield from _rollback(site, whole=True)
            raise
    yield either(site.commit)


class Transaction:
    """A transactional block, entered with ``with`` on a blocking connection (a ``Site``) or
    ``async with`` on an async one (an ``AsyncSite``): the same procedures (``_enter``,
    ``_leave``) carried out by ``effects.run`` or ``effects.arun``. ``transaction`` and
    ``atransaction`` make one; see the module's docstring."""

    def __init__(
        self,
        guard: Driver,
        site: AnySite,
        scope: str,
        key: str,
        *,
        payload: Any = None,
        table: str | None = None,
        savepoint: bool = True,
        result_type: Any = None,
        **options: Any,
    ) -> None:
        self.guard, self.site, self.savepoint = guard, site, savepoint
        self.records = _record_table(guard, table)
        self.call = _call(guard, scope, key, payload, result_type, options)
        _refuse_external_effects(self.call, site)
        self.seen = transactional.observe(self.call)  # None unless metrics or tracing are on
        self.kind = ""
        self.tx: Tx | None = None

    def _entered(self) -> Effects[Tx]:
        """Inside the block's span (while observed): open the block and claim its key."""
        if self.seen is not None:
            self.seen.__enter__()
        try:
            self.kind, self.tx = yield from _enter(
                self.guard, self.call, self.records, self.site, self.savepoint, self.seen
            )
        except BaseException as exc:
            self._unobserved(exc)
            raise
        return self.tx

    def _left(self, failed: BaseException | None) -> Effects[None]:
        """Store the block's result and commit, or roll back; then the span ends."""
        assert self.tx is not None
        try:
            yield from _leave(
                self.site,
                self.records,
                self.kind,
                self.call,
                self.tx,
                failed is not None,
                self.seen,
            )
        except BaseException as exc:
            self._unobserved(exc)
            raise
        self._unobserved(failed)

    def _unobserved(self, exc: BaseException | None) -> None:
        if self.seen is not None:
            self.seen.__exit__(None if exc is None else type(exc), exc, None)

    def __enter__(self) -> Tx:
        if isinstance(self.site, AsyncSite):
            raise ConfigurationError("an async connection's block is entered with async with")
        return effects.run(self._entered())

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        effects.run(self._left(exc))

    async def __aenter__(self) -> Tx:
        if not isinstance(self.site, AsyncSite):
            raise ConfigurationError("a blocking connection's block is entered with with")
        return await effects.arun(self._entered())

    async def __aexit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        await effects.arun(self._left(exc))


def transaction(guard: Driver, conn: Any, scope: str, key: str, **options: Any) -> Transaction:
    """``with transaction(guard, conn, scope, key) as tx:``; ``Guard.transaction`` is this.
    Options: ``payload``, ``table``, ``savepoint``, ``result_type`` and the scope's policy
    overrides (``Transaction``)."""
    return Transaction(guard, site_for(conn), scope, key, **options)


def atransaction(guard: Driver, conn: Any, scope: str, key: str, **options: Any) -> Transaction:
    """``async with atransaction(guard, conn, scope, key) as tx:``; the async twin."""
    return Transaction(guard, AsyncSite(conn), scope, key, **options)
