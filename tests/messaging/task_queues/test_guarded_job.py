"""The shared guarded job (mideng.messaging.task_queue) without a queue: the enqueue side's
pending mark under threads and processes, the worker side's replay of a redelivered job, the
request id that travels with the job, and the mark's release by the scope's policy."""

from __future__ import annotations

import multiprocessing
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

import pytest

from mideng import Guard, open_store
from mideng.context import get_request_id, request_id_scope
from mideng.errors import ConfigurationError, InvalidKeyError
from mideng.messaging.task_queue import JOB_META, Enqueue, GuardedJob
from tests.brokers import token
from tests.services import REDIS_URL, need


class Sent:
    """A queue stand-in: the jobs sent, by id, with their keyword arguments."""

    def __init__(self) -> None:
        self.jobs: list[tuple[str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    def __call__(self, job_id: str, kwargs: dict[str, Any]) -> None:
        with self.lock:
            self.jobs.append((job_id, kwargs))


def make(
    guard: Guard,
    body: Callable[..., Any],
    *,
    scope: str | None = None,
    pending_for: float = 60.0,
    policy: dict[str, Any] | None = None,
) -> GuardedJob:
    return GuardedJob(
        guard, scope or f"tq-{token()}", "order:{order_id}", None, policy, pending_for, 0.05, body
    )


@pytest.fixture(params=["memory", "redis"])
def guard(request: pytest.FixtureRequest) -> Iterator[Guard]:
    if request.param == "redis":
        need("redis")
        made = Guard(open_store(REDIS_URL), lease=2.0)
    else:
        made = Guard(open_store("memory://"), lease=2.0)
    yield made
    made.close()


def never(order_id: str) -> str:
    raise AssertionError("not run here")


def test_sixteen_threads_enqueueing_one_key_send_one_job(guard: Guard) -> None:
    job, sent = make(guard, never), Sent()
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: job.enqueue(("1001",), {}, sent), range(16)))
    assert len(sent.jobs) == 1
    first = sent.jobs[0][0]
    assert sorted(a.state.value for a in answers) == ["pending"] * 15 + ["queued"]
    assert {a.job_id for a in answers} == {first}
    assert {a.key for a in answers} == {"order:1001"}


def _enqueue_in_a_process(scope: str, keys: list[str]) -> list[tuple[str, str, str | None]]:
    guard = Guard(open_store(REDIS_URL), lease=2.0)
    job = make(guard, never, scope=scope)
    answers = [job.enqueue((key,), {}, lambda job_id, kwargs: None) for key in keys]
    guard.close()
    return [(a.key, a.state.value, a.job_id) for a in answers]


def test_four_processes_enqueueing_the_same_keys_send_each_once() -> None:
    need("redis")
    scope, keys = f"tq-{token()}", [f"k{n}" for n in range(50)]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(4, mp_context=context) as pool:
        runs = list(pool.map(_enqueue_in_a_process, [scope] * 4, [keys] * 4))
    answers = [answer for run in runs for answer in run]
    queued = [(key, job_id) for key, state, job_id in answers if state == "queued"]
    assert sorted(key for key, _ in queued) == sorted(f"order:{k}" for k in keys)
    holder = dict(queued)
    pending = [(key, job_id) for key, state, job_id in answers if state == "pending"]
    assert len(pending) == 150
    assert all(holder[key] == job_id for key, job_id in pending)


def test_a_redelivered_job_runs_once_and_replays_the_first_result(guard: Guard) -> None:
    runs: list[str] = []

    def deduct(order_id: str) -> dict[str, str]:
        runs.append(order_id)
        return {"order": order_id, "run": str(len(runs))}

    job, sent = make(guard, deduct), Sent()
    job.enqueue(("1001",), {}, sent)
    ((_, kwargs),) = sent.jobs
    first = job.run(("1001",), dict(kwargs), lambda error: False)
    again = job.run(("1001",), dict(kwargs), lambda error: False)  # the same job, delivered again
    other = job.run(("1001",), {}, lambda error: False)  # the key sent without enqueue
    assert first == again == other == {"order": "1001", "run": "1"}
    assert runs == ["1001"]


def test_a_delivery_meeting_the_key_in_flight_waits_and_replays(guard: Guard) -> None:
    inside, release = threading.Event(), threading.Event()
    runs: list[str] = []

    def slow(order_id: str) -> str:
        runs.append(order_id)
        inside.set()
        release.wait(10)
        return f"done:{order_id}"

    job = make(guard, slow)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(job.run, ("7",), {}, lambda error: False)
        assert inside.wait(10)
        second = pool.submit(job.run, ("7",), {}, lambda error: False)
        # The second delivery cannot finish while the first holds the key.
        assert not second.done()
        release.set()
        assert first.result(10) == second.result(10) == "done:7"
    assert runs == ["7"]


def test_the_request_id_travels_with_the_job(guard: Guard) -> None:
    seen: list[str | None] = []

    def body(order_id: str) -> None:
        seen.append(get_request_id())

    job, sent = make(guard, body), Sent()
    with request_id_scope("req-42"):
        job.enqueue(("9",), {}, sent)
    ((_, kwargs),) = sent.jobs
    assert kwargs[JOB_META]["request_id"] == "req-42"
    job.run(("9",), dict(kwargs), lambda error: False)
    assert seen == ["req-42"]
    record = guard.get(job.scope, "order:9")
    assert record is not None
    assert record.request_id == "req-42"


def test_the_mark_is_freed_when_the_job_finishes_and_the_kept_run_answers_done(
    guard: Guard,
) -> None:
    job, sent = make(guard, lambda order_id: order_id), Sent()
    queued = job.enqueue(("5",), {}, sent)
    assert job.enqueue(("5",), {}, sent).state is Enqueue.PENDING
    job.run(("5",), dict(sent.jobs[0][1]), lambda error: False)
    assert guard.store.get(job.pending_scope, "order:5") is None
    done = job.enqueue(("5",), {}, sent)
    assert (done.state, done.job_id, len(sent.jobs)) == (Enqueue.DONE, None, 1)
    assert queued.sent
    assert not done.sent


def test_a_failed_job_keeps_its_mark_while_the_queue_retries_it(guard: Guard) -> None:
    def broken(order_id: str) -> None:
        raise RuntimeError("supplier down")

    job, sent = make(guard, broken), Sent()  # on_error="release": a failure is not kept
    job.enqueue(("3",), {}, sent)
    kwargs = sent.jobs[0][1]
    with pytest.raises(RuntimeError):
        job.run(("3",), dict(kwargs), lambda error: True)  # the queue will deliver it again
    assert job.enqueue(("3",), {}, sent).state is Enqueue.PENDING
    with pytest.raises(RuntimeError):
        job.run(("3",), dict(kwargs), lambda error: False)  # its last try
    again = job.enqueue(("3",), {}, sent)
    assert again.state is Enqueue.QUEUED
    assert len(sent.jobs) == 2


def test_a_recorded_failure_is_kept_and_answers_done(guard: Guard) -> None:
    def broken(order_id: str) -> None:
        raise RuntimeError("refused")

    job, sent = make(guard, broken, policy={"on_error": "record"}), Sent()
    job.enqueue(("4",), {}, sent)
    with pytest.raises(RuntimeError):
        job.run(("4",), dict(sent.jobs[0][1]), lambda error: False)
    assert job.enqueue(("4",), {}, sent).state is Enqueue.DONE


def test_a_lost_job_frees_its_key_after_pending_for(guard: Guard) -> None:
    job, sent = make(guard, never, pending_for=0.3), Sent()
    first = job.enqueue(("8",), {}, sent)
    assert job.enqueue(("8",), {}, sent).state is Enqueue.PENDING
    wait = threading.Event()
    wait.wait(0.5)  # the mark's lease, 0.3 s, runs out: a lost job holds the key no longer
    second = job.enqueue(("8",), {}, sent)
    assert second.sent
    assert second.job_id != first.job_id


def test_a_send_that_fails_frees_the_key(guard: Guard) -> None:
    job = make(guard, never)

    def down(job_id: str, kwargs: dict[str, Any]) -> None:
        raise ConnectionError("queue down")

    with pytest.raises(ConnectionError):
        job.enqueue(("6",), {}, down)
    assert job.enqueue(("6",), {}, Sent()).sent


def test_bad_set_ups_and_calls_are_refused_clearly() -> None:
    guard = Guard(open_store("memory://"))
    with pytest.raises(ConfigurationError, match="key="):
        GuardedJob(guard, "tq-bad", None, None, None, 60, 1, never)
    with pytest.raises(ConfigurationError, match="pending_for"):
        GuardedJob(guard, "tq-bad", "{order_id}", None, None, 0, 1, never)
    with pytest.raises(ConfigurationError, match="in_flight_delay"):
        GuardedJob(guard, "tq-bad", "{order_id}", None, None, 60, -1, never)
    job = make(guard, never)
    with pytest.raises(ConfigurationError, match="never"):
        job.enqueue((), {"sku": "x"}, Sent())
    open_kwargs = GuardedJob(
        guard, "tq-bad", "{order_id}", None, None, 60, 1, lambda order_id, **kw: 1
    )
    with pytest.raises(ConfigurationError, match=JOB_META):
        open_kwargs.enqueue(("1",), {JOB_META: 1}, Sent())
    with pytest.raises(InvalidKeyError):
        job.enqueue(("\x00",), {}, Sent())


@pytest.mark.parametrize(
    ("module", "factory", "extra"),
    [
        ("rq", "idempotent_job", "rq"),
        ("arq", "idempotent_job", "arq"),
        ("dramatiq", "idempotent_actor", "dramatiq"),
        ("huey", "idempotent_job", "huey"),
    ],
)
def test_a_missing_queue_names_the_extra(
    module: str, factory: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib

    decorator = getattr(importlib.import_module(f"mideng.messaging.{module}"), factory)
    monkeypatch.setitem(sys.modules, module, None)  # import of it fails as if not installed
    arguments: list[Any] = [object()] if module == "huey" else []
    with pytest.raises(ConfigurationError, match=rf"mideng\[{extra}\]"):
        decorator(*arguments, lambda: None, "tq-missing", key="{order_id}")
