"""The relay: publish committed outbox rows, in order per key, from any number of relays.

One batch is three steps. ``claim`` (one short transaction) leases up to ``batch_keys`` keys
that have unsent rows, and up to ``batch_rows`` unkeyed rows, to a fresh token: ``FOR UPDATE
SKIP LOCKED`` lets relays claim side by side without waiting for each other, and a key row a
writer holds (an uncommitted ``add``) is skipped until it commits. Then each key's rows are
published one after the other in sequence order (different keys and unkeyed rows at once), a
key stopping at its first failure or when its lease runs short (mideng.outbox.publishing).
``settle`` (one transaction)
marks what was published, counts failures, moves each key's mark and lets the keys go.

Up to ``depth`` batches are in flight at once (mideng.outbox.pipeline): while one is written
back, the next is claimed and published, on keys no batch in flight holds.

A relay killed at any point leaves its keys leased until the lease runs out; another relay
then publishes from the key's mark again, with the same message ids: at-least-once, in order.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from mideng.db.caller_connection import AsyncSite, aexecute_for
from mideng.db.dialect import kind_of, retryable
from mideng.db.drive import adrive
from mideng.db.statements import Op, check_table
from mideng.errors import ConfigurationError
from mideng.messaging.publish import Publisher, open_publisher
from mideng.observability import logs
from mideng.outbox.engines import async_engine, listen_conninfo
from mideng.outbox.ops import (
    Failure,
    Left,
    Row,
    claim,
    left_pending,
    purge_keys,
    purge_rows,
    settle,
    settle_keys,
)
from mideng.outbox.pipeline import NOTHING, Batch, drain
from mideng.outbox.publishing import BROKER_WAIT_SHARE, Backoff, Publishing
from mideng.outbox.schema import DEFAULT_TABLE, channel
from mideng.outbox.statements import Queries
from mideng.outbox.wake import Listen, Poll
from mideng.schema.apply import check, database_url
from mideng.schema.apply import command as migrate_command
from mideng.schema.tables import family_of
from mideng.schema.tables import outbox as outbox_tables

T = TypeVar("T")


class _Claimed(NamedTuple):
    """A claimed batch: its lease token and end, its rows and the keys it leased."""

    token: str
    until: float
    rows: list[Row]
    keys: list[str]


class Relay:
    """Publishes ``db``'s outbox (a URL, an ``Engine`` or an ``AsyncEngine``) to ``broker`` (a
    URL or a ``Publisher``). A publisher opened from a URL gets a ``timeout`` of a tenth of the
    lease (``BROKER_WAIT_SHARE``); one passed in should give up on its own as soon, or honour
    the cancellation of a publish at the lease's end.

    ``lease``: how long a relay may hold a key before another takes it over (longer than a
    batch's publishes take). ``max_attempts``: failed publishes of a row before it is dead
    (kept with its last error, and passed over). ``retention``: seconds a sent row is kept.
    ``depth``: batches in flight at once (one written back while the next publishes), so a
    relay holds up to ``depth * batch_keys`` keys; 1 on SQLite, whose single writer would
    only make the overlap wait on its file lock.
    """

    def __init__(
        self,
        db: Any,
        broker: str | Publisher,
        *,
        table: str = DEFAULT_TABLE,
        exchange: str | None = None,
        batch_keys: int = 50,
        batch_rows: int = 2000,
        concurrency: int = 64,
        lease: float = 30.0,
        max_attempts: int = 10,
        backoff: Backoff | None = None,
        retention: float = 7 * 86400.0,
        purge_every: float = 60.0,
        poll: float = 1.0,
        listen: bool = True,
        depth: int | None = None,
    ) -> None:
        if batch_keys < 1 or batch_rows < 1 or concurrency < 1 or max_attempts < 1:
            raise ConfigurationError("batch sizes, concurrency and max_attempts must be >= 1")
        if depth is not None and depth < 1:
            raise ConfigurationError("depth (batches in flight) must be >= 1")
        for name, seconds in (("lease", lease), ("poll", poll)):
            # Compared so that NaN fails too: with a NaN or infinite lease a key's lease never
            # lapses, and the keys of a relay that died stay leased for good.
            if not 0 < seconds < math.inf:
                raise ConfigurationError(
                    f"{name} must be a finite number of seconds > 0: {seconds}"
                )
        if not (retention >= 0 and purge_every >= 0):
            raise ConfigurationError("retention and purge_every must be seconds >= 0")
        self.table = check_table(table)
        self.engine, self._owns_engine = async_engine(db)
        if isinstance(broker, str):
            options: dict[str, Any] = {"timeout": lease * BROKER_WAIT_SHARE}
            if exchange:
                options["exchange"] = exchange
            self.publisher: Publisher = open_publisher(broker, **options)
        elif exchange:
            raise ConfigurationError("exchange= goes with a broker URL, not a Publisher")
        else:
            self.publisher = broker
        self.batch_keys, self.batch_rows = batch_keys, batch_rows
        self.concurrency = concurrency
        self.lease = lease
        self.max_attempts = max_attempts
        self.backoff = backoff or Backoff()
        self._publishing = Publishing(self.publisher, lease, max_attempts, self.backoff)
        self.retention, self.purge_every, self.poll = retention, purge_every, poll
        conninfo = listen_conninfo(self.engine) if listen else None
        self.wake: Poll = Listen(conninfo, channel(table)) if conninfo else Poll()
        self._depth = depth
        self._queries: Queries | None = None
        self._started = False
        self._purged_at = 0.0
        #: What its batches did since it was made, summed (the service's progress lines).
        self.done = NOTHING

    # -- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        if self._started:
            return
        async with self.engine.connect() as connection:
            kind = kind_of(connection.dialect)
            await adrive(self._checked(family_of(kind)), aexecute_for(kind), connection)
            nowait = False
            if kind == "mariadb":
                # NOWAIT (mideng.outbox.statements) relies on a failed lock undoing only its
                # own statement: with innodb_rollback_on_timeout it would undo the whole
                # transaction, locks already taken included, and the relay takes SKIP LOCKED.
                undo_all = await connection.exec_driver_sql("SELECT @@innodb_rollback_on_timeout")
                nowait = not int(undo_all.scalar_one())
            self._queries = Queries(kind, self.table, nowait=nowait)
        await self.publisher.start()
        await self.wake.start()
        self._started = True

    def _checked(self, family: str) -> Op[None]:
        """The outbox's tables are there, at this mideng's schema version (mideng.schema):
        the relay creates nothing, so a missing or older outbox is refused at its start."""
        tables = outbox_tables(self.table)
        url = database_url(self.engine.url)
        return check(family, tables, command=migrate_command(url, tables))

    async def close(self) -> None:
        await self.wake.close()
        await self.publisher.close()
        if self._owns_engine:
            await self.engine.dispose()
        self._started = False

    async def __aenter__(self) -> Relay:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- running -----------------------------------------------------------------------------
    async def run_once(self) -> Batch:
        """Publish everything committed that no other relay holds, then purge; the totals."""
        await self.start()
        total = await self._drain(None)
        await self.purge()
        return total

    async def run(self, stop: asyncio.Event) -> None:
        """Publish until ``stop`` is set; the batches in flight then finish first."""
        await self.start()
        while not stop.is_set():
            try:
                await self._drain(stop)
            except Exception as exc:  # the database or broker is down: wait, then try again
                logs.relay_batch_failed(exc)
            if time.time() - self._purged_at >= self.purge_every:
                try:
                    await self.purge()
                except Exception as exc:
                    logs.purge_failed(exc)
            # Drained: nothing was due, or what is due keeps failing. Wait for a commit's
            # NOTIFY (one that came during the drain is still queued) or the poll.
            await self.wake.wait(self.poll, stop)

    async def batch(self) -> Batch:
        """One claim, publish and settle, with no other batch in flight."""
        await self.start()
        claimed = await self._claim()
        if claimed is None:
            return NOTHING
        return await self._finish(claimed, asyncio.Semaphore(self.concurrency))

    @property
    def depth(self) -> int:
        if self._depth is not None:
            return self._depth
        return 1 if self.q.kind == "sqlite" else 2

    async def _drain(self, stop: asyncio.Event | None) -> Batch:
        # One gate for every batch in flight: ``concurrency`` bounds the keys publishing at
        # once across them, and a batch's keys queue behind the one before it, so the next
        # batch's keys take the places the last one's keys leave.
        gate = asyncio.Semaphore(self.concurrency)
        return await drain(
            self._claim, lambda claimed: self._finish(claimed, gate), self.depth, stop
        )

    async def _claim(self) -> _Claimed | None:
        token = str(uuid.uuid4())
        now = time.time()
        until = now + self.lease
        # Each claim statement stands alone on PostgreSQL and SQLite (a lease is committed the
        # moment it is taken; the read that follows sees a prefix of each key, whatever commits
        # meanwhile), so no BEGIN/COMMIT round trips on the wake-up path. MySQL's claim is a
        # locking read and an update of what it returned: one transaction. A deadlock victim
        # (another batch's write-back, another relay) took nothing, and claims again.
        rows, keys = await self._transact(
            lambda: claim(self.q, token, now, until, self.batch_keys, self.batch_rows),
            retries=5,
            autocommit=not self.q.mysql,
        )
        if rows:
            return _Claimed(token, until, rows, keys)
        if keys:
            # Keys marked pending with nothing left to publish (a relay stopped between
            # writing a batch's rows back and letting a writer-held key go): let them go now,
            # rather than keep them leased, and re-leased, with nothing to do.
            await self._transact(functools.partial(settle_keys, self.q, token, keys, ()), retries=5)
        return None

    async def _finish(self, claimed: _Claimed, gate: asyncio.Semaphore) -> Batch:
        """Publish a claimed batch, then write it back."""
        token, rows = claimed.token, claimed.rows
        sent, failures = await self._publish(rows, claimed.until, gate)
        settle_now = time.time()
        held = await self._transact(
            lambda: settle(self.q, token, settle_now, sent, failures, claimed.keys), retries=5
        )
        await self._settle_held(token, held, failures, claimed.until)
        dead = sum(1 for failure in failures if failure.dead)
        for failure in failures:
            logs.publish_failed(
                failure.id, failure.key, failure.attempts, failure.dead, failure.error
            )
        finished = Batch(len(rows), len(sent), len(failures), dead)
        began = claimed.until - self.lease
        logs.relay_batch(
            len(rows),
            len(claimed.keys),
            len(sent),
            len(failures),
            len(claimed.keys) - len(held),
            began,
        )
        self.done = self.done.plus(finished)
        return finished

    async def _settle_held(
        self, token: str, held: list[str], failures: Sequence[Failure], until: float
    ) -> None:
        """The keys the write-back skipped because a writer held them: settled as soon as the
        writer's transaction ends. Past the lease they are left as they are: still leased to
        ``token``, they are claimed again once it lapses, and their rows' states (written
        already) say what is left to publish."""
        pause = 0.002
        while held and time.time() < until:
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.1)
            try:
                held = await self._transact(
                    functools.partial(settle_keys, self.q, token, held, failures), retries=5
                )
            except Exception as exc:  # the database blinked: the keys are still ours, go on
                logs.relay_batch_failed(exc)
        if held:
            logs.keys_left_leased(len(held))

    async def left(self) -> Left:
        """The rows still pending, and why (``Left``): what ``run_once`` could not publish."""
        await self.start()
        now = time.time()
        return await self._transact(lambda: left_pending(self.q, now))

    async def purge(self) -> int:
        await self.start()
        self._purged_at = time.time()
        cutoff = time.time() - self.retention
        deleted = await self._transact(lambda: purge_rows(self.q, cutoff))
        # The key rows in a transaction of their own: its locking read of the idle keys then
        # comes before any change (mideng.outbox.ops), and it holds no deleted row while it
        # locks (the row deletes may wait for writers' new rows, which is a wait, no cycle).
        await self._transact(lambda: purge_keys(self.q))
        return deleted

    # -- inside a batch --------------------------------------------------------------------
    @property
    def q(self) -> Queries:
        if self._queries is None:
            raise ConfigurationError("the relay is not started")
        return self._queries

    async def _transact(
        self, make: Callable[[], Op[T]], retries: int = 0, autocommit: bool = False
    ) -> T:
        """Run one operation in a transaction of its own (or statement by statement, with
        ``autocommit``); a deadlock victim runs again."""
        attempt = 0
        while True:
            try:
                async with self.engine.connect() as connection:
                    if autocommit:
                        await connection.execution_options(isolation_level="AUTOCOMMIT")
                    elif self.q.mysql:
                        # InnoDB's REPEATABLE READ would keep the lock of every row a
                        # statement reads, and of the gaps between; READ COMMITTED lets go of
                        # those it does not change. That a statement asks for no other row's
                        # lock at all is the statements' part (mideng.outbox.statements).
                        await connection.execution_options(isolation_level="READ COMMITTED")
                    site = AsyncSite(connection)
                    await site.open(savepoint=False)
                    try:
                        answer = await site.run(make())
                        await site.commit()
                    except BaseException:
                        await site.rollback(whole=True)
                        raise
                    return answer
            except Exception as exc:
                if attempt >= retries or not retryable(getattr(exc, "orig", exc)):
                    raise
                attempt += 1

    async def _publish(
        self, rows: Sequence[Row], until: float, gate: asyncio.Semaphore
    ) -> tuple[list[str], list[Failure]]:
        return await self._publishing.batch(rows, until, gate)
