"""OperationConsumer: a message runs a multi-step operation, one record per message.

    @guard.operation("notify", key="{order_id}", steps=("mark_notified", "send_sms", "coupon"))
    def notify(order_id: str, phone: str) -> str: ...

    guard.configure_scope("notify", on_error="retry", max_attempts=5)
    consumer = OperationConsumer(guard, notify)          # an adapter's Consumer
    await rabbitmq.consume(consumer, url, queue="paid", stop=stop)

The operation runs under the message's key (``key=``, else mideng.messaging.keys.default_key):
its record, in the operation's scope, is the message's only dedup record, and its steps'
downstream keys (``step_key()``) derive from it, so every delivery of a message is the same
operation. A redelivery of one that finished is acked without running; one whose holder died
resumes at its first unfinished step (its finished steps are read back, never run again);
one that is running elsewhere goes back to the broker after ``in_flight_delay``.

What counts as an attempt, once, in one place: a claim of the operation's record that runs
its body (the record's ``attempts``). The first delivery is attempt 1; a delivery after a
failed run, and a take-over of a holder that died (kill -9, OOM), are the next. A delivery
that finds the operation finished or running elsewhere is no attempt. The limit is the
operation scope's ``max_attempts`` (its failures are kept: ``on_error="retry"``, required):
a run that fails goes back with backoff, and the one that fails as attempt ``max_attempts``
or later is dead-lettered, as is any delivery after it (AttemptsExhaustedError). A kill is
no failure: it is never dead-lettered by itself, only counted; an operation whose runs keep
dying shows in ``guard.stale()`` with its attempts growing.

Local steps (``@guard.step(conn="conn")``) commit with their step records in the body's own
transaction; the remote steps run after it commits (docs/messaging.md#operations).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mideng.context import request_id_scope
from mideng.core.event_loop import to_thread
from mideng.core.failure import message_of
from mideng.core.policy import OnError
from mideng.core.record import Status
from mideng.errors import (
    AttemptsExhaustedError,
    ConfigurationError,
    InProgressError,
    InvalidKeyError,
    RecordedFailureError,
    StoreUnavailableError,
    UnresolvedError,
)
from mideng.guard.guard import Guard
from mideng.messaging.keys import KeyFn, default_key, key_of, request_id_of
from mideng.messaging.message import Message
from mideng.messaging.verdict import (
    MIN_DELAY,
    Ack,
    DeadLetter,
    Retry,
    RetryRules,
    Verdict,
    after_failure,
    metric_label,
)
from mideng.observability import logs, observers
from mideng.operations.register import Register, Registered

#: The operation's keyword arguments for one message.
ArgumentsFn = Callable[[Message], Mapping[str, Any]]


def json_body(message: Message) -> Mapping[str, Any]:
    """The message's body, a JSON object, as the operation's keyword arguments."""
    try:
        value = json.loads(message.body)
    except ValueError as exc:
        raise InvalidKeyError(f"the message's body is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise InvalidKeyError(f"the message's body is a JSON {type(value).__name__}, not an object")
    return value


class OperationConsumer:
    """Runs the operation ``operation`` (a function decorated with ``@guard.operation``) once
    per message key, resuming it on a redelivery; adapters carry out its verdicts.

    ``arguments``: ``message -> kwargs`` of the operation (default: the body, a JSON object).
    ``key``: ``message -> str``, the operation's key (default: ``default_key``).
    ``retry_delay``, ``max_retry_delay``, ``in_flight_delay``: see RetryRules; the attempt
    limit is the operation scope's ``max_attempts`` (see the module's doc).
    """

    def __init__(
        self,
        guard: Guard,
        operation: Callable[..., Any],
        *,
        arguments: ArgumentsFn = json_body,
        key: KeyFn | None = None,
        retry_delay: float = 1.0,
        max_retry_delay: float = 60.0,
        in_flight_delay: float = 1.0,
    ) -> None:
        scope = getattr(operation, "__mideng_scope__", None)
        registered = Register.of(guard).scopes.get(scope) if isinstance(scope, str) else None
        if scope is None or registered is None or registered.wrapper is not operation:
            raise ConfigurationError(
                f"{operation!r} is not an operation of this guard: decorate it with "
                "@guard.operation(...) on the guard the consumer is given"
            )
        self.guard = guard
        self.scope: str = scope
        self.operation: Registered = registered
        self.arguments = arguments
        self.key: KeyFn = key if key is not None else default_key
        self.policy = guard.policy(scope, **registered.options)
        if self.policy.on_error is not OnError.RETRY:
            raise ConfigurationError(
                f"operation {scope} runs from a consumer: its failures must be kept, so its "
                "record counts the message's attempts (guard.configure_scope("
                f"{scope!r}, on_error='retry', max_attempts=N) before the consumer)"
            )
        self.rules = RetryRules(
            self.policy.max_attempts, retry_delay, max_retry_delay, in_flight_delay
        )
        self.engine = None  # what adapters read: this consumer holds no transaction open

    async def handle(self, message: Message) -> Verdict:
        """Decide one message: run or resume its operation, and say what the adapter must do."""
        with request_id_scope(request_id_of(message)):
            verdict = await self._decide(message)
            if observers.metrics is not None:
                observers.metrics.consumed(self.scope, metric_label(verdict))
            if isinstance(verdict, DeadLetter):
                logs.consumer_dead_letters(message.id, verdict.reason)
            return verdict

    async def handle_batch(self, messages: Sequence[Message]) -> list[Verdict]:
        """A batch, one message after another: each operation claims its own record."""
        return [await self.handle(m) for m in messages]

    async def _decide(self, message: Message) -> Verdict:
        try:
            key = key_of(message, self.key)
            kwargs = dict(self.arguments(message))
        except InvalidKeyError as exc:
            return DeadLetter(str(exc))
        except Exception as exc:  # arguments= raised: the message can't be run, ever
            return DeadLetter(f"arguments of {self.scope} unreadable: {message_of(exc)}")
        where = f"{self.scope}:{key}"
        try:
            record = await self.guard.aget(self.scope, key)
            if record is not None and record.status is Status.SUCCEEDED:
                return Ack(ran=False)
            if self.operation.coroutine:
                await self.operation.rerun(key, (), kwargs)
            else:
                # to_thread copies the context: the request id goes with the operation.
                await to_thread(self.operation.rerun, key, (), kwargs)
        except InProgressError as exc:
            delay = min(exc.retry_after or self.rules.in_flight_delay, self.rules.in_flight_delay)
            return Retry(max(delay, MIN_DELAY), f"{where} is in flight")
        except (AttemptsExhaustedError, RecordedFailureError) as exc:
            return DeadLetter(f"{where} failed before and was given up on: {message_of(exc)}")
        except UnresolvedError:
            return Retry(self.rules.max_retry_delay, f"{where} is unresolved; resolve it to go on")
        except StoreUnavailableError as exc:
            return Retry(self.rules.retry_delay, f"store unavailable: {message_of(exc)}")
        except Exception as exc:
            return await self._failed(key, where, exc)
        return Ack(ran=True)

    async def _failed(self, key: str, where: str, exc: Exception) -> Verdict:
        """The body raised: its record keeps the failure and the attempt it was."""
        try:
            record = await self.guard.aget(self.scope, key)
        except Exception as store_exc:  # the count is the record's; unread, retry later
            logs.consumer_failure_uncounted(self.scope, key, store_exc)
            return Retry(self.rules.retry_delay, f"{where} failed: {message_of(exc)}")
        attempt = record.attempts if record is not None else 1
        logs.consumer_attempt_failed(self.scope, key, attempt, exc)
        return after_failure(where, attempt, exc, self.rules)
