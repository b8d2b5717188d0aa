"""The in-process broker's adapter: a queue of ``memory://name`` feeding a consumer.

    stop = asyncio.Event()
    await memory.consume(consumer, "memory://shop", queue="orders.paid", stop=stop)

Up to ``batch`` ready messages are taken at a time and decided together (more than one go to
``handle_batch``). An Ack acks; a Retry requeues the message to be taken again after its
delay; a DeadLetter copies it to ``dead_queue`` when one is given (its headers as they came,
the reason in ``x-dead-letter-reason``) and drops it. Messages taken and not settled when the
call ends, by ``stop`` after the batch in hand or by a cancellation in the middle of it, go
back to the queue at once and are delivered again: a handler that committed before that is
answered as a duplicate the next time.

The broker lives in this process (``mideng.messaging.in_process``): the consumers of a
``memory://`` URL are tasks and threads of the process that publishes to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from mideng.errors import ConfigurationError
from mideng.messaging.consumer import Consumer, decide, undecided
from mideng.messaging.in_process import Delivery, InProcessBroker, named
from mideng.messaging.memory.message import dead_headers, message_of
from mideng.messaging.verdict import Ack, DeadLetter, Retry, Verdict
from mideng.observability import logs


async def consume(
    consumer: Consumer,
    url: str,
    *,
    queue: str,
    stop: asyncio.Event,
    batch: int = 1,
    fetch_timeout: float = 1.0,
    dead_queue: str | None = None,
) -> None:
    """Consume ``queue`` of the in-process broker ``url`` names until ``stop`` is set; the
    batch in hand is finished first. ``fetch_timeout``: the longest wait for a message before
    ``stop`` is looked at again (a stop wakes the wait at once)."""
    if batch < 1:
        raise ConfigurationError(f"batch must be at least 1: {batch!r}")
    if not fetch_timeout > 0:
        raise ConfigurationError(f"fetch_timeout must be positive seconds: {fetch_timeout!r}")
    broker = named(url)
    while not stop.is_set():
        taken = broker.take(queue, batch)
        if not taken:
            await broker.wait(queue, fetch_timeout, stop)
            continue
        try:
            await _process(consumer, broker, taken, dead_queue)
        finally:
            # Cancelled or failed before settling: back on the queue, as a closed channel's
            # unacked deliveries are; a settled one is left as it is.
            for delivery in taken:
                broker.requeue(delivery)


async def _process(
    consumer: Consumer, broker: InProcessBroker, taken: Sequence[Delivery], dead: str | None
) -> None:
    messages = [message_of(delivery) for delivery in taken]
    try:
        verdicts = await decide(consumer, messages)
    except Exception as exc:
        # Not even a verdict (the store is down): every message comes back later, none is lost.
        logs.memory_messages_unhandled(len(messages), exc)
        verdicts = undecided(messages)
    for delivery, verdict in zip(taken, verdicts, strict=True):
        _settle(broker, delivery, verdict, dead)


def _settle(
    broker: InProcessBroker, delivery: Delivery, verdict: Verdict, dead: str | None
) -> None:
    if isinstance(verdict, Ack):
        broker.ack(delivery)
    elif isinstance(verdict, Retry):
        broker.requeue(delivery, verdict.delay)
    elif isinstance(verdict, DeadLetter):
        if dead is not None:
            headers = dead_headers(delivery.headers, verdict.reason)
            broker.put(dead, delivery.body, headers, delivery.message_id)
        logs.memory_message_dead_lettered(delivery.message_id, verdict.reason)
        broker.ack(delivery)
    else:
        raise TypeError(f"not a verdict: {verdict!r}")
