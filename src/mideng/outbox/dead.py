"""Dead outbox rows, for operators: listed, and requeued conditional on what was seen.

A row is dead after the relay's last failed publish (``state = 2``, its ``attempts`` and
``last_error`` kept); its key does not wait for it, the relay goes on to the key's next row.
``requeue`` puts a dead row back to pending at its place in its key: only while it is still
dead after the attempts the operator saw (``SeenRow``), from its first attempt again. Its
key's mark goes back below it, so the relay publishes it before any of the key's rows still
pending behind it, and if it fails again those wait behind it as behind any failing row; rows
of its key sent while it was dead are not sent again. Each row is requeued in a transaction of
its own by one conditional ``UPDATE`` (two operators, or a relay, between the look and the
act: the row changes once, the others are told ``Changed``); ``dry_run`` reads and answers
the same way, changing nothing.

``dead_rows`` / ``requeue`` take a sync SQLAlchemy ``Engine``; ``adead_rows`` /
``arequeue`` an ``AsyncEngine``, a sync ``Engine`` or a URL (``mideng.outbox.engines``).
PostgreSQL, MySQL/MariaDB and SQLite. The ``mideng outbox`` commands, Django's admin and a
dashboard call these.

``requeue_as_read`` is what ``mideng outbox requeue`` and ``manage.py mideng_requeue`` do:
read the rows (by id, or every dead row of a destination), then requeue them conditional on
that read; ``report`` and ``line`` shape the answers as both print them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from mideng.core.answers import Answer, Changed, Done, Gone
from mideng.core.audit import AuditEntry
from mideng.db.caller_connection import aexecute_for, execute_for
from mideng.db.dialect import kind_of
from mideng.db.drive import adrive, drive
from mideng.db.statements import Op, Stmt
from mideng.outbox.engines import async_engine
from mideng.outbox.ops import LIST_MAX
from mideng.outbox.schema import DEAD, DEFAULT_TABLE, PENDING
from mideng.outbox.statements import Queries
from mideng.schema import audit

T = TypeVar("T")


class SeenRow(NamedTuple):
    """What an operator saw of a dead row: its id and its failed publishes then."""

    id: str
    attempts: int


class OutboxRow(NamedTuple):
    """An outbox row as an operator sees it. ``state``: 0 pending, 1 sent, 2 dead;
    ``error``: the last failed publish's; ``created_at``: epoch seconds."""

    id: str
    destination: str
    key: str | None
    seq: int | None
    state: int
    attempts: int
    error: str | None
    created_at: float

    @property
    def seen(self) -> SeenRow:
        return SeenRow(self.id, self.attempts)

    def age(self, now: float) -> float:
        """Seconds since the row was written."""
        return max(now - self.created_at, 0.0)


def _row(values: Sequence[Any]) -> OutboxRow:
    return OutboxRow(
        str(values[0]),
        str(values[1]),
        values[2],
        None if values[3] is None else int(values[3]),
        int(values[4]),
        int(values[5]),
        values[6],
        float(values[7]),
    )


# -- the operations, written once ----------------------------------------------------------
def listed(q: Queries, destination: str | None, limit: int) -> Op[list[OutboxRow]]:
    """Up to ``limit`` dead rows (of ``destination``), oldest first."""
    if destination is None:
        res = yield Stmt(q.dead_all, {"limit": int(limit)})
    else:
        res = yield Stmt(q.dead_to, {"destination": destination, "limit": int(limit)})
    return [_row(values) for values in res.rows]


def read(q: Queries, ids: Sequence[str]) -> Op[dict[str, OutboxRow]]:
    """The rows of ``ids`` that exist, in whatever state, by id."""
    found: dict[str, OutboxRow] = {}
    for start in range(0, len(ids), LIST_MAX):
        part = ids[start : start + LIST_MAX]
        binds = {f"i{n}": value for n, value in enumerate(part)}
        res = yield Stmt(q.in_list("seen", len(part)), binds)
        found.update((row.id, row) for row in map(_row, res.rows))
    return found


def _still_dead(row: OutboxRow, seen: SeenRow) -> bool:
    return row.state == DEAD and row.attempts == seen.attempts


def requeued(
    q: Queries, seen: Sequence[SeenRow], dry_run: bool, operator: str | None = None
) -> Op[dict[str, Answer[OutboxRow]]]:
    """Each seen row back to pending (``dry_run``: what would be), in the order given; with
    ``operator``, each row requeued adds its audit row in its own transaction."""
    rows = yield from read(q, [s.id for s in seen])
    answers: dict[str, Answer[OutboxRow]] = {}
    for s in seen:
        row = rows.get(s.id)
        if row is None:
            answers[s.id] = Gone()
        elif not _still_dead(row, s):
            answers[s.id] = Changed(row)
        else:
            answers[s.id] = Done(row) if dry_run else (yield from _requeue(q, s, row, operator))
    return answers


def _requeue(
    q: Queries, seen: SeenRow, row: OutboxRow, operator: str | None
) -> Op[Answer[OutboxRow]]:
    for statement in q.begin:
        yield Stmt(statement, {})
    try:
        res = yield Stmt(q.requeue_row, {"id": seen.id, "attempts": seen.attempts})
        if res.rowcount == 1 and row.key is not None:
            yield Stmt(q.requeue_key, {"key": row.key, "seq": row.seq})
        if res.rowcount == 1 and operator is not None:
            yield from audit.added(q.audit, requeue_entry(operator, seen))
    except BaseException:
        yield Stmt(q.rollback, {})
        raise
    yield Stmt(q.commit, {})
    if res.rowcount == 1:
        return Done(row._replace(state=PENDING, attempts=0))
    # Changed between the read and the update: another operator came first.
    now = (yield from read(q, [seen.id])).get(seen.id)
    return Gone() if now is None else Changed(now)


# -- run on an engine ----------------------------------------------------------------------
def _run(engine: Any, table: str, make: Callable[[Queries], Op[T]]) -> T:
    with engine.connect() as pooled:
        # Statement by statement: a requeue begins and ends its own transactions.
        connection = pooled.execution_options(isolation_level="AUTOCOMMIT")
        kind = kind_of(connection.dialect)
        return drive(make(Queries(kind, table)), execute_for(kind), connection)


async def _arun(db: Any, table: str, make: Callable[[Queries], Op[T]]) -> T:
    engine, made = async_engine(db)
    try:
        async with engine.connect() as connection:
            await connection.execution_options(isolation_level="AUTOCOMMIT")
            kind = kind_of(connection.dialect)
            return await adrive(make(Queries(kind, table)), aexecute_for(kind), connection)
    finally:
        if made:
            await engine.dispose()


def dead_rows(
    engine: Any, *, destination: str | None = None, limit: int = 100, table: str = DEFAULT_TABLE
) -> list[OutboxRow]:
    """Up to ``limit`` dead rows of the outbox ``table`` on ``engine`` (a sync SQLAlchemy
    ``Engine``), of ``destination`` if given, oldest first."""
    return _run(engine, table, lambda q: listed(q, destination, limit))


async def adead_rows(
    db: Any, *, destination: str | None = None, limit: int = 100, table: str = DEFAULT_TABLE
) -> list[OutboxRow]:
    """``dead_rows`` on an ``AsyncEngine`` (or a sync ``Engine``, or a URL)."""
    return await _arun(db, table, lambda q: listed(q, destination, limit))


def rows_by_id(engine: Any, ids: Sequence[str], *, table: str = DEFAULT_TABLE) -> list[OutboxRow]:
    """The rows of ``ids`` as they are now (any state; those not there left out), in
    ``ids``' order: what an operator sees before a ``requeue`` by id."""
    found = _run(engine, table, lambda q: read(q, ids))
    return [found[row_id] for row_id in ids if row_id in found]


def requeue(
    engine: Any,
    seen: Sequence[SeenRow],
    *,
    dry_run: bool = False,
    table: str = DEFAULT_TABLE,
    operator: str | None = None,
) -> dict[str, Answer[OutboxRow]]:
    """Requeue each row of ``seen`` (its id and the attempts seen, e.g. ``row.seen`` of
    ``dead_rows``) that is still dead after those attempts; by id, in ``seen``'s order:
    ``Done(now=the row, pending again)`` (with ``dry_run``: the row that would be, nothing
    changed), ``Changed(now=the row as it is)`` or ``Gone``. ``operator``: who asks; each row
    requeued then adds a row to the outbox's audit table (``mideng.schema.audit``) in the
    transaction that requeues it."""
    return _run(engine, table, lambda q: requeued(q, seen, dry_run, operator))


async def arequeue(
    db: Any,
    seen: Sequence[SeenRow],
    *,
    dry_run: bool = False,
    table: str = DEFAULT_TABLE,
    operator: str | None = None,
) -> dict[str, Answer[OutboxRow]]:
    """``requeue`` on an ``AsyncEngine`` (or a sync ``Engine``, or a URL)."""
    return await _arun(db, table, lambda q: requeued(q, seen, dry_run, operator))


def requeue_entry(operator: str, seen: SeenRow) -> AuditEntry:
    """The audit row of a requeue of the row ``seen``."""
    return AuditEntry(
        operator, "requeue", f"outbox row {seen.id}", dead_after(seen.attempts), "pending again"
    )


def dead_after(attempts: int) -> str:
    return f"dead after {attempts} attempts"


# -- what an operator's requeue reads first, and what it prints after -----------------------
#: A row's ``state`` as the commands and the admin show it.
STATES = {PENDING: "pending", 1: "sent", DEAD: "dead"}


def state_name(state: int) -> str:
    return STATES.get(state, str(state))


def seen_as_read(ids: Sequence[str], read_rows: Sequence[OutboxRow]) -> list[SeenRow]:
    """What a requeue asks for after reading ``read_rows``: ``ids`` in order (none given:
    every row read). A row not dead when read is asked for as seen dead with attempts -1,
    which matches nothing, so it answers ``Changed``; a row not read, ``Gone``."""
    by_id = {row.id: row for row in read_rows}
    order = list(ids) if ids else [row.id for row in read_rows]
    return [
        by_id[row_id].seen
        if row_id in by_id and by_id[row_id].state == DEAD
        else SeenRow(row_id, -1)
        for row_id in order
    ]


#: Every dead row of a destination, as the requeue commands read them.
EVERY_DEAD = 1_000_000


def requeue_as_read(
    engine: Any,
    ids: Sequence[str],
    destination: str | None,
    *,
    dry_run: bool = False,
    table: str = DEFAULT_TABLE,
) -> dict[str, Answer[OutboxRow]]:
    """The rows of ``ids`` (or every dead row of ``destination``: exactly one of the two)
    read, then requeued while each is still as read: ``requeue``'s answers."""
    if bool(ids) == (destination is not None):
        raise ValueError("give row IDs or a destination, not both and not neither")
    read_rows = (
        rows_by_id(engine, ids, table=table)
        if ids
        else dead_rows(engine, destination=destination, limit=EVERY_DEAD, table=table)
    )
    return requeue(engine, seen_as_read(ids, read_rows), dry_run=dry_run, table=table)


def outcome(answer: Answer[OutboxRow], dry_run: bool) -> str:
    """One answer as a word: ``requeued`` / ``would_requeue``, ``changed`` or ``gone``."""
    if isinstance(answer, Done):
        return "would_requeue" if dry_run else "requeued"
    return "changed" if isinstance(answer, Changed) else "gone"


def all_done(answers: dict[str, Answer[OutboxRow]]) -> bool:
    """Whether every row asked for was (or would be) requeued: the commands' exit 0."""
    return all(isinstance(answer, Done) for answer in answers.values())


def report(answers: dict[str, Answer[OutboxRow]], dry_run: bool) -> dict[str, Any]:
    """The answers as JSON, field names stable (docs/cli.md)."""
    done = sum(1 for answer in answers.values() if isinstance(answer, Done))
    return {
        "dry_run": dry_run,
        "requeued": 0 if dry_run else done,
        "rows": [
            {
                "id": row_id,
                "outcome": outcome(answer, dry_run),
                "state": None if isinstance(answer, Gone) else state_name(answer.now.state),
                "attempts": None if isinstance(answer, Gone) else answer.now.attempts,
            }
            for row_id, answer in answers.items()
        ],
    }


def line(row_id: str, answer: Answer[OutboxRow], dry_run: bool) -> str:
    """One answer as a line of text."""
    if isinstance(answer, Done):
        return f"{'would requeue' if dry_run else 'requeued'} {row_id}"
    if isinstance(answer, Changed):
        now = answer.now
        return f"changed meanwhile: {row_id} is {state_name(now.state)}, attempts {now.attempts}"
    return f"changed meanwhile: {row_id} is gone"


def lines(answers: dict[str, Answer[OutboxRow]], dry_run: bool) -> list[str]:
    """A line per answer, then the count."""
    done = sum(1 for answer in answers.values() if isinstance(answer, Done))
    total = f"{'would requeue' if dry_run else 'requeued'} {done} row(s)"
    return [*(line(row_id, answer, dry_run) for row_id, answer in answers.items()), total]


__all__ = [
    "STATES",
    "OutboxRow",
    "SeenRow",
    "adead_rows",
    "all_done",
    "arequeue",
    "dead_rows",
    "line",
    "lines",
    "outcome",
    "report",
    "requeue",
    "requeue_as_read",
    "rows_by_id",
    "seen_as_read",
    "state_name",
]
