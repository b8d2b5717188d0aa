"""Celery: a task that runs once per business key, however often the broker delivers it.

    @idempotent_task(app, lambda: guard, "stock", key="order:{order_id}")
    def deduct_stock(order_id: str, quantity: int) -> dict[str, int]:
        ...

With ``acks_late=True`` a task message is acked only after the task returned, and with
``task_reject_on_worker_lost=True`` a worker process killed mid-task gives its message back:
the broker delivers it again, to this worker or another. Producers also send the same
business task twice (a retried request, a re-published event). So the body runs under the
guard, keyed on the task's business arguments (not the task id, which a re-send changes): a
delivery whose key already finished returns the stored result without running; one whose key
is still running elsewhere is retried later with ``task.retry`` (the worker's slot is freed,
the message comes back after the holder's lease would run out, capped at ``in_flight_delay``);
a holder that died leaves its lease to run out and the next delivery takes the key over.

Both settings are on by default here (``acks_late``, ``reject_on_worker_lost``); other
``task_options`` go to ``app.task``. ``guard`` is a Guard, or a callable returning one, so each
worker process opens its own store connections after the pool forked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from mideng.core.keys import KeySpec
from mideng.errors import ConfigurationError, InProgressError
from mideng.guard.decorator import build
from mideng.guard.driver import Driver
from mideng.messaging.outcome import MIN_DELAY
from mideng.stores.registry import require

F = TypeVar("F", bound=Callable[..., Any])


def idempotent_task(
    app: Any,
    guard: Driver | Callable[[], Driver],
    scope: str,
    *,
    key: KeySpec,
    payload: Callable[..., Any] | None = None,
    in_flight_delay: float = 5.0,
    policy: dict[str, Any] | None = None,
    **task_options: Any,
) -> Callable[[F], Any]:
    """Register the decorated function as a Celery task of ``app`` guarded per business key.

    ``key``: a template over the task's arguments (``"order:{order_id}"``) or a callable
    taking them by name; ``payload``: the same, fingerprinted (a reused key with other data is
    refused). ``policy``: the guard's options for this scope (lease, ttl, on_error ...); the
    in-progress behaviour is always "raise", turned into a retry here. ``in_flight_delay``:
    the longest a delivery whose key is running elsewhere waits before it comes back.
    """
    require("celery", "celery")
    if key is None:
        raise ConfigurationError(
            "idempotent_task needs key=: the business arguments that make two sends the same "
            "task (a hash of every argument would dedupe on incidental ones too)"
        )
    if not in_flight_delay > 0:
        raise ConfigurationError(f"in_flight_delay must be positive seconds: {in_flight_delay!r}")
    options = {**(policy or {}), "in_progress": "raise"}
    resolve: Callable[[], Driver] = guard if callable(guard) else (lambda: guard)

    def decorate(fn: F) -> Any:
        guarded = build(resolve, scope, key, payload, options)(fn)

        def run(task: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return guarded(*args, **kwargs)
            except InProgressError as exc:
                # Held elsewhere: this delivery goes back; one more retry is always allowed,
                # since a holder's lease ends (renewed while it lives, taken over once dead).
                countdown = max(min(exc.retry_after or in_flight_delay, in_flight_delay), MIN_DELAY)
                raise task.retry(
                    exc=exc, countdown=countdown, max_retries=task.request.retries + 1
                ) from exc

        # Not functools.wraps: Celery would read fn's signature through __wrapped__ and check
        # the bound task's arguments against it minus its first parameter.
        run.__name__ = fn.__name__
        run.__qualname__ = fn.__qualname__
        run.__module__ = fn.__module__
        run.__doc__ = fn.__doc__
        settings = {
            "name": f"{fn.__module__}.{fn.__qualname__}",
            "acks_late": True,
            "reject_on_worker_lost": True,
            **task_options,
            "bind": True,
        }
        return app.task(**settings)(run)

    return decorate
