"""The steps capability: what multi-step operations (mideng.operations) keep beside the records.

An operation is a guarded call whose body calls steps. Each step that finishes is recorded
under the operation's claim: the write names the claim's owner (minted per claim, so it names
the claim and its fence exactly) and is refused with LeaseLostError once that claim is no
longer the live one, so a zombie holder can never record a step. The operation's arguments
are kept too (``begin_steps``), so an unfinished operation can be listed and run again.

Rows live until the operation's body returns and its record completes (``clear_steps``): an
operation that never finishes stays listed by ``operations`` rather than vanishing with a ttl.

``LocalSteps`` is the embedded implementation for the memory store, under the store's own
lock; the other stores have theirs in their packages (``sqlite.steps``, ``sql.steps``,
``redis.steps``, ``hybrid.steps``).
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from mideng.core.decide import holds
from mideng.core.record import Record, Status, Ticket
from mideng.errors import LeaseLostError

#: The step name under which the operation's own arguments are kept.
ARGUMENTS = ""


@dataclass(slots=True)
class Finished:
    """A recorded step's result, as its codec stored it."""

    result: bytes
    codec: str


@dataclass(slots=True)
class OperationEntry:
    """An operation with kept steps: its arguments, the steps done so far (in the order they
    were recorded) and its record (None when the record is gone: released after a failure)."""

    scope: str
    key: str
    arguments: bytes | None
    codec: str | None
    started_at: float
    steps: list[str] = field(default_factory=list)
    record: Record | None = None


@dataclass(frozen=True, slots=True)
class OperationPosition:
    """Where a page of operations ended: its last one's start, scope and key (the order the
    steps table's ``_begun`` index reads them in)."""

    started_at: float
    scope: str
    key: str

    @classmethod
    def of(cls, entry: OperationEntry) -> OperationPosition:
        return cls(entry.started_at, entry.scope, entry.key)

    def precedes(self, entry: OperationEntry) -> bool:
        return (self.started_at, self.scope, self.key) < order_of(entry)


def order_of(entry: OperationEntry) -> tuple[float, str, str]:
    return (entry.started_at, entry.scope, entry.key)


def page_of(
    found: list[OperationEntry], after: OperationPosition | None, limit: int
) -> list[OperationEntry]:
    """The ``limit`` first of ``found`` after ``after``, in page order (stores that read
    every operation: the memory store, Redis)."""
    taken = [e for e in found if after is None or after.precedes(e)]
    return sorted(taken, key=order_of)[:limit]


def step_lost(scope: str, key: str, owner: str, current: Record | None) -> LeaseLostError:
    state = "gone" if current is None else f"{current.status.value}, fence {current.fence}"
    return LeaseLostError(
        f"the claim on {scope}:{key} (owner {owner}) is no longer live; the record is {state}. "
        "The step's result was not recorded.",
        current,
    )


class StepStore(abc.ABC):
    """Steps of multi-step operations, sync and async. ``owner`` is the operation's claim."""

    @abc.abstractmethod
    def begin_steps(
        self, scope: str, key: str, owner: str, arguments: bytes, codec: str
    ) -> dict[str, Finished]:
        """Keep the arguments (the first ones stay) and return the steps finished so far, in
        one round trip; LeaseLostError unless ``owner`` holds the live claim."""

    @abc.abstractmethod
    def record_step(
        self, scope: str, key: str, owner: str, step: str, result: bytes, codec: str
    ) -> None:
        """Record a finished step; LeaseLostError (and nothing written) unless ``owner`` holds
        the live claim."""

    @abc.abstractmethod
    def clear_steps(self, scope: str, key: str) -> None:
        """Drop an operation's steps and arguments (its record has completed)."""

    @abc.abstractmethod
    def operations(
        self, scope: str | None = None, limit: int = 100, after: OperationPosition | None = None
    ) -> list[OperationEntry]:
        """Operations with kept steps or arguments, with their records: the ``limit`` oldest
        that follow ``after`` (None: from the oldest), in the order ``(started_at, scope,
        key)``; the last one's ``OperationPosition.of`` starts the next page."""

    @abc.abstractmethod
    def operation(self, scope: str, key: str) -> OperationEntry | None:
        """One operation with kept steps or arguments, with its record; None without them."""

    @abc.abstractmethod
    def running(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        """Processing records, live or not, oldest first (the stale-task view)."""

    @abc.abstractmethod
    async def abegin_steps(
        self, scope: str, key: str, owner: str, arguments: bytes, codec: str
    ) -> dict[str, Finished]: ...

    @abc.abstractmethod
    async def arecord_step(
        self, scope: str, key: str, owner: str, step: str, result: bytes, codec: str
    ) -> None: ...

    @abc.abstractmethod
    async def aclear_steps(self, scope: str, key: str) -> None: ...

    @abc.abstractmethod
    async def aoperations(
        self, scope: str | None = None, limit: int = 100, after: OperationPosition | None = None
    ) -> list[OperationEntry]: ...

    @abc.abstractmethod
    async def aoperation(self, scope: str, key: str) -> OperationEntry | None: ...

    @abc.abstractmethod
    async def arunning(self, scope: str | None = None, limit: int = 100) -> list[Record]: ...


def holding(current: Record | None, owner: str, now: float) -> bool:
    """core.decide.holds, for a claim named by its owner alone."""
    return current is not None and holds(current, Ticket("", "", owner, current.fence), now)


class LocalSteps(StepStore):
    """Steps in a dict beside the records, under the store's lock (the memory store)."""

    offload_reason = "a dict under a lock: nothing blocks, so the async twins call the sync ones"
    _lock: threading.Lock
    _data: dict[tuple[str, str], Record]
    _clock: Callable[[], float]
    #: (scope, key) -> step -> (result, codec, recorded at); made by the store.
    _steps: dict[tuple[str, str], dict[str, tuple[bytes, str, float]]]

    def _held(self, scope: str, key: str, owner: str) -> dict[str, tuple[bytes, str, float]]:
        current = self._data.get((scope, key))
        if not holding(current, owner, self._clock()):
            raise step_lost(scope, key, owner, current)
        return self._steps.setdefault((scope, key), {})

    def begin_steps(
        self, scope: str, key: str, owner: str, arguments: bytes, codec: str
    ) -> dict[str, Finished]:
        with self._lock:
            rows = self._held(scope, key, owner)
            rows.setdefault(ARGUMENTS, (arguments, codec, self._clock()))
            return {n: Finished(r, c) for n, (r, c, _) in rows.items() if n != ARGUMENTS}

    def record_step(
        self, scope: str, key: str, owner: str, step: str, result: bytes, codec: str
    ) -> None:
        with self._lock:
            self._held(scope, key, owner).setdefault(step, (result, codec, self._clock()))

    def clear_steps(self, scope: str, key: str) -> None:
        with self._lock:
            self._steps.pop((scope, key), None)

    def operations(
        self, scope: str | None = None, limit: int = 100, after: OperationPosition | None = None
    ) -> list[OperationEntry]:
        with self._lock:
            found = [
                self._entry(s, k, rows)
                for (s, k), rows in self._steps.items()
                if scope is None or s == scope
            ]
        return page_of(found, after, limit)

    def operation(self, scope: str, key: str) -> OperationEntry | None:
        with self._lock:
            rows = self._steps.get((scope, key))
            return None if rows is None else self._entry(scope, key, rows)

    def _entry(
        self, scope: str, key: str, rows: dict[str, tuple[bytes, str, float]]
    ) -> OperationEntry:
        args = rows.get(ARGUMENTS)
        done = sorted((at, n) for n, (_, _, at) in rows.items() if n != ARGUMENTS)
        return OperationEntry(
            scope,
            key,
            None if args is None else args[0],
            None if args is None else args[1],
            args[2] if args is not None else (done[0][0] if done else 0.0),
            [n for _, n in done],
            self._data.get((scope, key)),
        )

    def running(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        with self._lock:
            found = [
                r
                for r in self._data.values()
                if r.status is Status.PROCESSING and (scope is None or r.scope == scope)
            ]
        return sorted(found, key=lambda r: r.created_at)[:limit]

    async def abegin_steps(
        self, scope: str, key: str, owner: str, arguments: bytes, codec: str
    ) -> dict[str, Finished]:
        return self.begin_steps(scope, key, owner, arguments, codec)

    async def arecord_step(
        self, scope: str, key: str, owner: str, step: str, result: bytes, codec: str
    ) -> None:
        self.record_step(scope, key, owner, step, result, codec)

    async def aclear_steps(self, scope: str, key: str) -> None:
        self.clear_steps(scope, key)

    async def aoperations(
        self, scope: str | None = None, limit: int = 100, after: OperationPosition | None = None
    ) -> list[OperationEntry]:
        return self.operations(scope, limit, after)

    async def aoperation(self, scope: str, key: str) -> OperationEntry | None:
        return self.operation(scope, key)

    async def arunning(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return self.running(scope, limit)
