"""What every task queue's guarded job shares (RQ, arq, Dramatiq, Huey): a business key that
holds one pending job at a time, and a body that runs once per key however often it is
delivered.

Two records per key, both in the Guard's store:

- the *pending mark* (scope ``"<scope>#pending"``), claimed by ``enqueue`` before the job is
  sent, its owner the job's id. While it is held, another ``enqueue`` with the key sends
  nothing and answers with the holder's job id (``Enqueue.PENDING``). It is released by that
  job when it finishes for good: after its body returned or replayed, or after an error the
  queue will not retry. Its lease (``pending_for``) bounds a job the queue lost (a flushed
  queue, a Huey consumer killed mid-job): after it the key may be enqueued again.
- the *run record* (scope ``"<scope>"``), the Guard's own: the body runs under it, its lease
  kept alive by the Guard's heartbeat while it runs. A second delivery of one job (a worker
  killed, a visibility timeout, a retry) or a second job of the key replays the first run's
  result. While the key runs elsewhere, the delivery waits for the holder's lease (renewed
  while it lives, run out once it is dead) and tries again, at most ``in_flight_delay``
  apart. Whether the record is kept after the body (``ttl``) or released on an error
  (``on_error``) is the scope's policy; an ``enqueue`` that finds it kept sends nothing and
  answers ``Enqueue.DONE``.

The request id of the enqueuing call (mideng.context) travels with the job in the reserved
keyword ``_mideng_job`` and is the request id of the run, so the run record carries it.
"""

from __future__ import annotations

import contextlib
import enum
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from mideng.context import get_request_id, request_id_scope
from mideng.core.keys import KeySpec, check_key, check_scope, fast_binder, render
from mideng.core.record import FAILED, IN_PROGRESS, SUCCEEDED, ClaimRequest, Record, Ticket
from mideng.errors import ConfigurationError, InProgressError, LeaseLostError
from mideng.guard.decorator import build
from mideng.guard.guard import Guard
from mideng.messaging.verdict import MIN_DELAY

#: The keyword a job carries its id and the enqueuer's request id in; no business argument
#: takes it.
JOB_META = "_mideng_job"
#: The pending mark's scope is the job's scope with this after it.
PENDING_SUFFIX = "#pending"


class Enqueue(enum.Enum):
    """What an ``enqueue`` did."""

    #: This call sent the job; ``job_id`` is its id.
    QUEUED = "queued"
    #: A job of the key is pending or running; nothing was sent; ``job_id`` is that job's.
    PENDING = "pending"
    #: The key's run is recorded (the scope keeps it); nothing was sent; ``job_id`` is None.
    DONE = "done"


@dataclass(frozen=True, slots=True)
class Enqueued:
    """The answer of ``enqueue``: the key, the job that holds it, and what this call did."""

    key: str
    job_id: str | None
    state: Enqueue

    @property
    def sent(self) -> bool:
        return self.state is Enqueue.QUEUED


class GuardedJob:
    """One job function of a task queue: its key over the business arguments, the pending mark
    the enqueue side holds, and the body run under the Guard on the worker side."""

    def __init__(
        self,
        guard: Guard | Callable[[], Guard],
        scope: str,
        key: KeySpec,
        payload: Callable[..., Any] | None,
        policy: dict[str, Any] | None,
        pending_for: float,
        in_flight_delay: float,
        fn: Callable[..., Any],
    ) -> None:
        if key is None:
            raise ConfigurationError(
                "a guarded job needs key=: the business arguments that make two jobs the same "
                "(a hash of every argument would dedupe on incidental ones too)"
            )
        if not pending_for > 0:
            raise ConfigurationError(f"pending_for must be positive seconds: {pending_for!r}")
        if not in_flight_delay > 0:
            raise ConfigurationError(
                f"in_flight_delay must be positive seconds: {in_flight_delay!r}"
            )
        self.scope = check_scope(scope)
        self.pending_scope = check_scope(scope + PENDING_SUFFIX)
        self.key = key
        self.pending_for = pending_for
        self.in_flight_delay = in_flight_delay
        self.fn = fn
        self.resolve: Callable[[], Guard] = guard if callable(guard) else (lambda: guard)
        self.bind = fast_binder(inspect.signature(fn))
        options = {**(policy or {}), "in_progress": "raise"}
        self.guarded = build(self.resolve, scope, key, payload, options)(fn)

    def key_of(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The business key of one call's arguments (a bad call is refused here, at enqueue)."""
        try:
            arguments = self.bind(args, kwargs)
        except TypeError as exc:
            raise ConfigurationError(f"{self.fn.__qualname__}: {exc}") from None
        return check_key(render(self.key, arguments))

    # -- the enqueue side -------------------------------------------------------------------

    def enqueue(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        send: Callable[[str, dict[str, Any]], Any],
    ) -> Enqueued:
        """Claim the key's pending mark and ``send(job_id, kwargs)``; or answer without
        sending while a job of the key is pending or running, or its run is kept."""
        key = self.key_of(args, kwargs)
        guard = self.resolve()
        job_id = uuid.uuid4().hex
        claim = guard.store.claim(self._pending(key, job_id))
        if not claim.acquired:
            return self._held(key, claim.outcome, claim.record)
        try:
            if _kept(guard.get(self.scope, key)):
                guard.store.release(Ticket.of(claim.record))
                return Enqueued(key, None, Enqueue.DONE)
            send(job_id, self._with_meta(kwargs, job_id))
        except BaseException:
            guard.store.release(Ticket.of(claim.record))  # nothing was sent: free the key
            raise
        return Enqueued(key, job_id, Enqueue.QUEUED)

    async def aenqueue(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        send: Callable[[str, dict[str, Any]], Awaitable[Any]],
    ) -> Enqueued:
        """``enqueue`` for a queue whose send is a coroutine (arq), on the store's async twins."""
        key = self.key_of(args, kwargs)
        guard = self.resolve()
        job_id = uuid.uuid4().hex
        claim = await guard.store.aclaim(self._pending(key, job_id))
        if not claim.acquired:
            return self._held(key, claim.outcome, claim.record)
        try:
            if _kept(await guard.aget(self.scope, key)):
                await guard.store.arelease(Ticket.of(claim.record))
                return Enqueued(key, None, Enqueue.DONE)
            await send(job_id, self._with_meta(kwargs, job_id))
        except BaseException:
            await guard.store.arelease(Ticket.of(claim.record))
            raise
        return Enqueued(key, job_id, Enqueue.QUEUED)

    def _pending(self, key: str, job_id: str) -> ClaimRequest:
        return ClaimRequest(
            self.pending_scope, key, job_id, self.pending_for, None, request_id=get_request_id()
        )

    def _held(self, key: str, outcome: Any, record: Record) -> Enqueued:
        if outcome is not IN_PROGRESS:
            # The mark is only ever claimed and released, never completed: anything else is a
            # store holding rows it should not.
            raise ConfigurationError(
                f"{self.pending_scope}:{key} is {record.status.value}: that scope is the pending "
                "marks' own; no other writer may use it"
            )
        return Enqueued(key, record.owner, Enqueue.PENDING)

    def _with_meta(self, kwargs: dict[str, Any], job_id: str) -> dict[str, Any]:
        if JOB_META in kwargs:
            raise ConfigurationError(f"{JOB_META!r} is mideng's own keyword on a guarded job")
        return {**kwargs, JOB_META: {"id": job_id, "request_id": get_request_id()}}

    # -- the worker side ----------------------------------------------------------------------

    def run(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], will_retry: Callable[[Exception], bool]
    ) -> Any:
        """Run one delivery: the body once per key, the first run's result for every other;
        then free the pending mark, unless the body failed and the queue will try it again
        (``will_retry(error)``: the queue's own rule)."""
        meta = kwargs.pop(JOB_META, None) or {}
        with request_id_scope(meta.get("request_id")):
            while True:
                try:
                    result = self.guarded(*args, **kwargs)
                    break
                except InProgressError as exc:
                    # Running elsewhere (a copy of this job, or an earlier one): its lease
                    # ends, renewed while it lives or run out once it is dead; then this
                    # delivery replays its result or takes the key over.
                    time.sleep(self._wait(exc))
                except Exception as exc:
                    if not will_retry(exc):
                        self._free(args, kwargs, meta)
                    raise
        self._free(args, kwargs, meta)
        return result

    async def arun(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], will_retry: Callable[[Exception], bool]
    ) -> Any:
        """``run`` for an async body (arq)."""
        import asyncio

        meta = kwargs.pop(JOB_META, None) or {}
        with request_id_scope(meta.get("request_id")):
            while True:
                try:
                    result = await self.guarded(*args, **kwargs)
                    break
                except InProgressError as exc:
                    await asyncio.sleep(self._wait(exc))
                except Exception as exc:
                    if not will_retry(exc):
                        await self._afree(args, kwargs, meta)
                    raise
        await self._afree(args, kwargs, meta)
        return result

    def _wait(self, exc: InProgressError) -> float:
        return max(min(exc.retry_after or self.in_flight_delay, self.in_flight_delay), MIN_DELAY)

    def _free(self, args: tuple[Any, ...], kwargs: dict[str, Any], meta: dict[str, Any]) -> None:
        """Release the key's pending mark if this job holds it (a job sent without
        ``enqueue`` holds none; a mark taken over after ``pending_for`` is another job's)."""
        if "id" not in meta:
            return
        store = self.resolve().store
        mark = store.get(self.pending_scope, self.key_of(args, kwargs))
        if mark is not None and mark.owner == meta["id"]:
            # Taken over since the read: the mark is the new holder's.
            with contextlib.suppress(LeaseLostError):
                store.release(Ticket.of(mark))

    async def _afree(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], meta: dict[str, Any]
    ) -> None:
        if "id" not in meta:
            return
        store = self.resolve().store
        mark = await store.aget(self.pending_scope, self.key_of(args, kwargs))
        if mark is not None and mark.owner == meta["id"]:
            with contextlib.suppress(LeaseLostError):
                await store.arelease(Ticket.of(mark))


#: mideng's options of a guarded job, with their defaults; a queue's decorator takes them as
#: keywords beside the queue's own: ``payload`` (a callable over the job's arguments,
#: fingerprinted), ``policy`` (the Guard's options for the scope: lease, ttl, on_error ...),
#: ``pending_for`` (seconds a job may hold its key pending before the key may be enqueued
#: again: a job the queue lost), ``in_flight_delay`` (the longest a delivery whose key runs
#: elsewhere waits between tries).
JOB_OPTIONS: dict[str, Any] = {
    "payload": None,
    "policy": None,
    "pending_for": 3600.0,
    "in_flight_delay": 5.0,
}


def job_maker(
    guard: Guard | Callable[[], Guard], scope: str, key: KeySpec, options: dict[str, Any]
) -> Callable[[Callable[..., Any]], GuardedJob]:
    """Take mideng's options (``JOB_OPTIONS``) out of a queue decorator's keywords, leaving the
    queue's own in ``options``; a function making the GuardedJob of a decorated function. The
    options are checked here, at decoration, against a stand-in body."""
    ours = {name: options.pop(name, default) for name, default in JOB_OPTIONS.items()}

    def make(fn: Callable[..., Any]) -> GuardedJob:
        return GuardedJob(
            guard,
            scope,
            key,
            ours["payload"],
            ours["policy"],
            ours["pending_for"],
            ours["in_flight_delay"],
            fn,
        )

    make(_checked)
    return make


def _checked(*args: Any, **kwargs: Any) -> None:
    """The stand-in body the options are checked against."""


class QueueJob:
    """What each queue's job object shares: its GuardedJob, and its function's name and doc
    (a worker or a log names the job by them)."""

    def __init__(self, job: GuardedJob) -> None:
        self.job = job
        self.__name__ = job.fn.__name__
        self.__qualname__ = job.fn.__qualname__
        self.__doc__ = job.fn.__doc__


def _kept(record: Record | None) -> bool:
    """A run record the scope keeps: a result, or a recorded failure, every copy replays."""
    if record is None:
        return False
    return record.status is SUCCEEDED or (record.status is FAILED and record.error is not None)
