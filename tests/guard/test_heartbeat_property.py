"""Property: whatever renewals meet, a body never runs twice while its holder is alive.

Hypothesis draws, per key, a holder body several leases long, duplicate callers at random
moments, and the faults its renewals meet: bursts of store errors (never so long that no
retry could get through before the lease ends), slow renewals, and — the two ways a live
holder may legitimately lose its record — an operator's ``forget`` or a renewal that hangs for
longer than the lease. Many keys run at once on one Guard, so their beats share the timer.

Checked: a key whose holder met neither forget nor hang ran its body exactly once, its holder
got its own result and every duplicate was refused or replayed; a key that met one ran at most
twice, the second run starting only after the forget or the hang, and a holder that was taken
over got LeaseLostError (fenced) rather than its completion landing.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from mideng import Guard
from mideng.core.record import ClaimRequest, Outcome, Ticket
from mideng.errors import InProgressError, LeaseLostError, StoreUnavailableError
from mideng.stores.base import Store
from mideng.stores.memory import MemoryStore
from mideng.stores.sqlite import SQLiteStore
from tests.helpers.renewals import patch_renewals
from tests.runner import AsyncRunner, Runner

pytestmark = pytest.mark.slow

LEASE = 1.0


@dataclass
class Plan:
    body: float  # seconds the holder's body takes
    duplicates: list[float]  # when each duplicate caller arrives, after the holder starts
    errors: list[int]  # renewal numbers (of the holder) that fail
    slow: dict[int, float]  # renewal number -> extra seconds it takes
    hang: int | None  # this renewal of the holder hangs 1.6 leases
    forget: float | None  # the key is forgotten this long after the holder starts


def _bursts(draw: st.DrawFn) -> list[int]:
    # At most two failures in a row: the first beat (a third into the lease) and a retry a
    # third of what is left later both fail, the next retry lands with a third of the lease
    # to spare. Longer outages are the lapse case, with its own test.
    failed: list[int] = []
    n = 1
    while n < 12:
        if draw(st.booleans()):
            burst = draw(st.integers(1, 2))
            failed.extend(range(n, n + burst))
            n += burst + 1
        else:
            n += 1
    return failed


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    body = draw(st.floats(0.4, 2.4))
    return Plan(
        body=body,
        duplicates=draw(st.lists(st.floats(0.05, body + 0.5), min_size=1, max_size=4)),
        errors=_bursts(draw),
        slow=draw(st.dictionaries(st.integers(1, 8), st.floats(0.01, 0.1), max_size=3)),
        hang=draw(st.one_of(st.none(), st.integers(1, 3))) if draw(st.booleans()) else None,
        forget=draw(st.one_of(st.none(), st.floats(0.1, body))) if draw(st.booleans()) else None,
    )


@dataclass
class Key:
    name: str
    plan: Plan
    began: threading.Event = field(default_factory=threading.Event)  # the holder's body runs
    runs: list[tuple[float, float]] = field(default_factory=list)
    holder_owner: str | None = None
    holder_result: object = None
    renewals: int = 0
    exempt: list[float] = field(default_factory=list)  # when the holder lost its protection
    duplicate_results: list[object] = field(default_factory=list)


class Faults:
    """Wraps one store's claim and renewals to follow each key's plan."""

    def __init__(self, store: Store, keys: dict[str, Key]) -> None:
        self.keys = keys
        self.lock = threading.Lock()
        claim, aclaim = store.claim, store.aclaim

        def claim_(req: ClaimRequest) -> Any:
            return self.seen(claim(req))

        async def aclaim_(req: ClaimRequest) -> Any:
            return self.seen(await aclaim(req))

        store.claim, store.aclaim = claim_, aclaim_  # type: ignore[method-assign]
        patch_renewals(store, self.fault)

    def seen(self, claim: Any) -> Any:
        if claim.outcome is Outcome.ACQUIRED:
            key = self.keys[claim.record.key]
            with self.lock:
                if key.holder_owner is None:
                    key.holder_owner = claim.record.owner
        return claim

    def fault(self, ticket: Ticket) -> float:
        """Seconds to stall this renewal first; raises for a planned error."""
        key = self.keys[ticket.key]
        if ticket.owner != key.holder_owner:
            return 0.0  # only the first holder's renewals meet faults
        with self.lock:
            key.renewals += 1
            n = key.renewals
        plan = key.plan
        if n == plan.hang:
            self.exempt(key)
            return 1.6 * LEASE
        if n in plan.errors:
            raise StoreUnavailableError(f"renewal {n} of {ticket.key} refused (injected)")
        return plan.slow.get(n, 0.0)

    def exempt(self, key: Key) -> None:
        with self.lock:
            key.exempt.append(time.monotonic())


def _scenario(store: Store, run: Runner, plans: list[Plan]) -> None:
    scope = f"prop-{uuid.uuid4().hex[:8]}"
    keys = {f"k{i}": Key(f"k{i}", plan) for i, plan in enumerate(plans)}
    faults = Faults(store, keys)
    guard = Guard(store, lease=LEASE)
    threads: list[threading.Thread] = []

    def body(key: Key) -> str:
        start = time.monotonic()
        key.began.set()
        time.sleep(key.plan.body)
        with faults.lock:
            key.runs.append((start, time.monotonic()))
        return f"result-{key.name}"

    def holder(key: Key) -> None:
        try:
            key.holder_result = run.call(guard, scope, key.name, lambda: body(key))
        except Exception as exc:
            key.holder_result = exc

    # Duplicates and the operator act only once the holder runs, so the holder is always the
    # first claim, however late its thread is scheduled.
    def duplicate(key: Key, at: float) -> None:
        assert key.began.wait(30)
        time.sleep(at)
        try:
            got: object = run.call(guard, scope, key.name, lambda: body(key))
        except Exception as exc:
            got = exc
        with faults.lock:
            key.duplicate_results.append(got)

    def forget(key: Key, at: float) -> None:
        assert key.began.wait(30)
        time.sleep(at)
        faults.exempt(key)
        guard.forget(scope, key.name)

    for key in keys.values():
        threads.append(threading.Thread(target=holder, args=(key,)))
        threads.extend(
            threading.Thread(target=duplicate, args=(key, at)) for at in key.plan.duplicates
        )
        if key.plan.forget is not None:
            threads.append(threading.Thread(target=forget, args=(key, key.plan.forget)))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive()
    for key in keys.values():
        _check(key)


def _check(key: Key) -> None:
    runs = sorted(key.runs)
    assert runs, f"{key.name}: the holder never ran"
    if not key.exempt:
        # Neither forgotten nor hung: one run, the holder's result, every duplicate refused
        # or given that same result.
        assert len(runs) == 1, f"{key.name}: ran {len(runs)} times, holder alive: {key.plan}"
        assert key.holder_result == f"result-{key.name}", (key.holder_result, key.plan)
        for got in key.duplicate_results:
            assert got == key.holder_result or isinstance(got, InProgressError), got
        return
    # Each forget or hang frees the key at most once more; the n-th run after the first
    # starts only after the n-th of them.
    exempt = sorted(key.exempt)
    assert len(runs) <= 1 + len(exempt), f"{key.name}: {len(runs)} runs, {exempt}: {key.plan}"
    for (start, _), freed in zip(runs[1:], exempt, strict=False):
        assert start >= freed, f"{key.name}: a run started before the key was freed"
    if len(runs) > 1 and runs[1][0] < runs[0][1]:
        # Overlapped by a second run: the holder's completion must have been fenced.
        assert isinstance(key.holder_result, LeaseLostError), key.holder_result


SETTINGS = settings(
    # Three examples of 12 to 20 keys each: as many plans as six of 6 to 10, in half the
    # time, since an example's keys run at once (and more of them share the beats' timer).
    max_examples=3,
    deadline=None,
    # Each example takes seconds of real time: shrinking one would take many minutes, and the
    # failing plan is printed whole anyway.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(params=["memory-sync", "memory-async", "sqlite-sync", "sqlite-async"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path]:
    return request.param, tmp_path


@SETTINGS
@given(st.lists(plans(), min_size=12, max_size=20), st.randoms())
def test_a_live_holder_never_runs_twice(
    where: tuple[str, Path], plans_: list[Plan], rnd: random.Random
) -> None:
    name, tmp = where
    kind, mode = name.split("-")
    store: Store = (
        MemoryStore() if kind == "memory" else SQLiteStore(str(tmp / f"{rnd.random()}.db"))
    )
    run: Runner = Runner() if mode == "sync" else AsyncRunner()
    if isinstance(run, AsyncRunner):
        # The async runner's bodies run in the loop's default executor: with its few threads
        # they would queue for seconds, far from the moments the plan gives them.
        run.loop.set_default_executor(ThreadPoolExecutor(256))
    try:
        _scenario(store, run, plans_)
    finally:
        if isinstance(run, AsyncRunner):
            run.submit(store.aclose())
        run.close()
        store.close()
