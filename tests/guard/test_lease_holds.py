"""A live holder's lease holds through what renewals meet: a lost lease elsewhere, transient
store errors (injected, and real killed connections), a renewal that hangs on another key.

Each scenario: a holder runs a body longer than its lease; a second caller arrives after the
lease would have run out without renewals. The body must run once and the second caller be
refused, on every store, through the sync and the async driver; the body then ends and its
completion lands.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from mideng import Guard
from mideng.core.record import Ticket
from mideng.errors import InProgressError, LeaseLostError, StoreUnavailableError
from mideng.guard import heartbeat
from tests.backends import Backend, Ctx, Opened, by_name
from tests.helpers.own_sockets import local_ports, port_of
from tests.helpers.renewals import patch_renewals
from tests.runner import AsyncRunner, Runner
from tests.services import MYSQL_URL, POSTGRES_URL, REDIS_URL, need

pytestmark = pytest.mark.slow

LEASE = 1.2
# Past the lease from the claim: without renewals the record is free to take over by then.
SECOND_AT = 1.7
BODY = 2.4

STORES = ["memory", "sqlite", "postgresql", "mysql", "redis", "hybrid"]


@pytest.fixture(params=STORES)
def store_backend(request: pytest.FixtureRequest) -> Backend:
    return by_name(request.param)


@pytest.fixture
def held(store_backend: Backend, ctx: Ctx) -> Iterator[Opened]:
    if store_backend.service is not None:
        need(store_backend.service)
    opened = store_backend.make(ctx)
    yield opened
    opened.store.close()


@pytest.fixture(params=["sync", "async"])
def drive(request: pytest.FixtureRequest, held: Opened) -> Iterator[Runner]:
    run: Runner = Runner() if request.param == "sync" else AsyncRunner()
    yield run
    if isinstance(run, AsyncRunner):
        run.submit(held.store.aclose())
    run.close()


class Holder:
    """One long body in a thread, counting its runs; ``outcome`` is what its call returned.
    The body lasts ``seconds``, or until ``finish`` is set: once the second caller has been
    refused past the unrenewed lease, the rest of the body proves nothing more."""

    def __init__(self, drive: Runner, guard: Guard, scope: str, key: str, seconds: float):
        self.runs = 0
        self.started = threading.Event()
        self.finish = threading.Event()
        self.outcome: object = None

        def body() -> str:
            self.runs += 1
            self.started.set()
            self.finish.wait(seconds)
            return "done"

        def call() -> None:
            try:
                self.outcome = drive.call(guard, scope, key, body)
            except BaseException as exc:  # the test reads it
                self.outcome = exc

        self.thread = threading.Thread(target=call)
        self.thread.start()
        assert self.started.wait(30), "the holder's body never started"

    def join(self) -> object:
        self.thread.join(60)
        assert not self.thread.is_alive()
        return self.outcome


def second_caller_is_refused(guard: Guard, scope: str, key: str, holder: Holder) -> None:
    runs: list[int] = []
    for _ in range(3):  # a caller's own retry: its first call may meet a killed connection
        try:
            guard.run(scope, key, lambda: runs.append(1))
        except InProgressError:
            break
        except StoreUnavailableError:
            continue
    else:
        pytest.fail("the second caller was never refused")
    assert runs == []
    holder.finish.set()
    assert holder.join() == "done"
    assert holder.runs == 1


def test_a_lost_lease_leaves_every_other_beat_renewing(held: Opened, drive: Runner) -> None:
    """One body's record is forgotten mid-run (its beat finds the lease lost); a body on
    another key, started after, is still renewed through its whole run."""
    guard = Guard(held.store, lease=LEASE)
    scope = f"lost-{uuid.uuid4().hex[:8]}"
    before = heartbeat.stats()["lost"]

    def forgotten() -> str:
        assert guard.forget(scope, "evicted")
        time.sleep(LEASE / 3 + 0.4)  # past the first renewal, which finds the record gone
        return "late"

    evicted = threading.Thread(
        target=lambda: _swallow(lambda: drive.call(guard, scope, "evicted", forgotten))
    )
    evicted.start()
    evicted.join(60)
    assert heartbeat.stats()["lost"] > before  # the lost beat was seen, and ended
    started = time.monotonic()
    holder = Holder(drive, guard, scope, "long", BODY)
    time.sleep(max(0.0, SECOND_AT - (time.monotonic() - started)))
    second_caller_is_refused(guard, scope, "long", holder)


def _swallow(fn: Callable[[], object]) -> None:
    with contextlib.suppress(LeaseLostError):  # the evicted holder's completion is fenced
        fn()


def _flaky(store: Any, failures: int) -> list[Ticket]:
    """Make the store's first ``failures`` renewals raise as a failover would; returns the
    tickets each refusal was for."""
    refused: list[Ticket] = []

    def before(ticket: Ticket) -> float:
        if len(refused) < failures:
            refused.append(ticket)
            raise StoreUnavailableError("connection reset (injected)")
        return 0.0

    patch_renewals(store, before)
    return refused


def test_transient_renewal_errors_are_retried_before_the_lease_ends(
    held: Opened, drive: Runner
) -> None:
    """Three renewals in a row fail (the first beat and two retries); the lease still holds."""
    refused = _flaky(held.store, 3)
    guard = Guard(held.store, lease=LEASE)
    scope = f"flaky-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    holder = Holder(drive, guard, scope, "k", BODY)
    time.sleep(max(0.0, SECOND_AT - (time.monotonic() - started)))
    second_caller_is_refused(guard, scope, "k", holder)
    assert len(refused) == 3  # the faults did happen, all on this holder's ticket
    assert {t.key for t in refused} == {"k"}


def _hang(store: Any, key: str, seconds: float) -> threading.Event:
    """The first renewal on ``key`` hangs ``seconds`` (sync: blocks a worker; async: awaits)."""
    hung = threading.Event()

    def before(ticket: Ticket) -> float:
        if ticket.key == key and not hung.is_set():
            hung.set()
            return seconds
        return 0.0

    patch_renewals(store, before)
    return hung


def test_a_hung_renewal_does_not_delay_another_keys_renewals(held: Opened, drive: Runner) -> None:
    """Key "stuck"'s first renewal hangs longer than a whole lease; key "live", started just
    after, is renewed all along."""
    hung = _hang(held.store, "stuck", 2 * LEASE)
    guard = Guard(held.store, lease=LEASE)
    scope = f"hang-{uuid.uuid4().hex[:8]}"
    stuck = Holder(drive, guard, scope, "stuck", BODY)
    started = time.monotonic()
    holder = Holder(drive, guard, scope, "live", BODY)
    time.sleep(max(0.0, SECOND_AT - (time.monotonic() - started)))
    assert hung.is_set()  # the stuck renewal is in flight while "live" must be renewed
    second_caller_is_refused(guard, scope, "live", holder)
    stuck.join()


# -- real faults: the holder's server connections killed mid-lease -------------------------------
def _kill_postgresql(opened: Opened) -> int:
    import psycopg

    table = opened.options["table"]
    with psycopg.connect(POSTGRES_URL.replace("+psycopg", ""), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE pid <> pg_backend_pid() AND query LIKE %s",
            (f"%{table}%",),
        ).fetchall()
    return len(rows)


def _kill_mysql(opened: Opened) -> int:
    import pymysql  # type: ignore[import-untyped]
    from sqlalchemy.engine import make_url

    url = make_url(MYSQL_URL)
    killed = 0
    conn = pymysql.connect(
        host=url.host,
        port=url.port,
        user=url.username,
        password=url.password or "",
        database=url.database,
    )
    try:
        with conn.cursor() as cur:
            # This process's connections to the test database (its stores'), not other
            # clients of a shared server: matched by the client port the server sees.
            ours = local_ports(url.port or 3306)
            cur.execute(
                "SELECT ID, HOST FROM information_schema.PROCESSLIST "
                "WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND COMMAND <> 'Daemon'"
            )
            for ident, host in cur.fetchall():
                if ":" not in host or port_of(host) not in ours:
                    continue
                try:
                    cur.execute(f"KILL CONNECTION {int(ident)}")
                    killed += 1
                except pymysql.err.OperationalError:
                    pass  # gone meanwhile
    finally:
        conn.close()
    return killed


def _kill_redis(opened: Opened) -> int:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        # This process's clients (the store's), not other clients of a shared server.
        me = client.client_id()
        ours = local_ports(client.connection_pool.connection_kwargs.get("port", 6379))
        killed = 0
        for entry in client.client_list(_type="normal"):
            if int(entry["id"]) != me and port_of(entry["addr"]) in ours:
                killed += int(client.client_kill_filter(_id=entry["id"]))
        return killed
    finally:
        client.close()


KILLERS = {"postgresql": _kill_postgresql, "mysql": _kill_mysql, "redis": _kill_redis}


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("name", sorted(KILLERS))
def test_killed_server_connections_do_not_stop_renewal(name: str, mode: str, ctx: Ctx) -> None:
    """As a failover does: every connection of the holder's store is killed before its first
    renewal; the renewals that meet the dead connections fail, the retries reconnect."""
    backend = by_name(name)
    assert backend.service is not None
    need(backend.service)
    opened = backend.make(ctx)
    run: Runner = Runner() if mode == "sync" else AsyncRunner()
    try:
        guard = Guard(opened.store, lease=LEASE)
        scope = f"kill-{uuid.uuid4().hex[:8]}"
        failures = heartbeat.stats()["failures"]
        started = time.monotonic()
        holder = Holder(run, guard, scope, "k", BODY)
        time.sleep(max(0.0, LEASE / 6 - (time.monotonic() - started)))
        assert KILLERS[name](opened) >= 1
        time.sleep(max(0.0, SECOND_AT - (time.monotonic() - started)))
        second_caller_is_refused(guard, scope, "k", holder)
        # The dead connection was met by a renewal (not only by the second caller) — except
        # on redis-py's asyncio client, which reconnects and resends by itself, so the kill
        # never reaches the heartbeat there.
        if (name, mode) != ("redis", "async"):
            assert heartbeat.stats()["failures"] > failures
    finally:
        if isinstance(run, AsyncRunner):
            run.submit(opened.store.aclose())
        run.close()
        opened.store.close()
