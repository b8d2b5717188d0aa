"""RabbitMQ adapter (aio-pika): manual acks, after the consumer decided.

    await rabbitmq.consume(consumer, "amqp://guest:guest@localhost/", queue="orders", stop=stop)

The queue is used as it is if it exists (its arguments, such as a dead-letter exchange, are
the operator's); otherwise it is declared durable. ``prefetch`` messages are in flight at
most; when more than one is waiting they are decided as one batch (one claim round trip). An
Ack acks; a Retry holds the message for its delay, then rejects it with requeue (RabbitMQ has
no delayed requeue of its own), so it is redelivered; a DeadLetter either publishes the message
to ``dead_letter_queue`` (declared durable, the reason in the ``x-dead-reason`` header) and acks
it, or, without one, rejects it without requeue, which routes it to the queue's dead-letter
exchange when it has one. ``Message.id`` is the AMQP ``message_id``; ``attempt`` comes from a
quorum queue's ``x-delivery-count``.

When ``stop`` is set the consumer is cancelled (no new deliveries), the batch in hand is
finished, messages delivered but not started and retries still waiting go back to the queue,
and the call returns.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

from mideng.errors import ConfigurationError
from mideng.messaging.consumer import IdempotentConsumer
from mideng.messaging.message import Message
from mideng.messaging.verdict import Ack, DeadLetter, Retry, Verdict

DEAD_REASON = "x-dead-reason"


def _aio_pika() -> Any:
    try:
        import aio_pika
    except ImportError as exc:  # pragma: no cover - the extra is installed in tests
        raise ConfigurationError(
            "the RabbitMQ adapter needs aio-pika: pip install 'mideng[rabbitmq]'"
        ) from exc
    return aio_pika


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def message_of(incoming: Any) -> Message:
    headers = {str(k): _text(v) for k, v in (incoming.headers or {}).items()}
    count = headers.get("x-delivery-count")
    attempt = int(count) + 1 if count is not None and count.isdigit() else None
    return Message(bytes(incoming.body), headers, incoming.message_id, attempt, incoming)


async def _queue(connection: Any, name: str) -> tuple[Any, Any]:
    """The channel and the queue: the existing one as configured, else a new durable one."""
    channel = await connection.channel()
    try:
        return channel, await channel.declare_queue(name, passive=True)
    except Exception as exc:
        if "NOT_FOUND" not in str(exc) and type(exc).__name__ != "ChannelNotFoundEntity":
            raise
    with contextlib.suppress(Exception):
        await channel.close()  # the broker closed it on the failed passive declare
    channel = await connection.channel()
    return channel, await channel.declare_queue(name, durable=True)


class _Settler:
    """Carries out verdicts on one channel; a Retry's delayed requeue is a timer it owns."""

    def __init__(self, channel: Any, dead_letter_queue: str | None) -> None:
        self.channel = channel
        self.dead_letter_queue = dead_letter_queue
        self.waiting: dict[int, tuple[asyncio.TimerHandle, Any]] = {}
        self.requeues: set[asyncio.Task[None]] = set()

    async def settle(self, messages: Sequence[Message], verdicts: Sequence[Verdict]) -> None:
        for message, verdict in zip(messages, verdicts, strict=True):
            incoming = message.raw
            if isinstance(verdict, Ack):
                await incoming.ack()
            elif isinstance(verdict, Retry):
                self._later(incoming, verdict.delay)
            else:
                await self.dead_letter(message, verdict)

    def _later(self, incoming: Any, delay: float) -> None:
        tag = incoming.delivery_tag
        loop = asyncio.get_running_loop()
        handle = loop.call_later(delay, self._requeue_now, tag)
        self.waiting[tag] = (handle, incoming)

    def _requeue_now(self, tag: int) -> None:
        _handle, incoming = self.waiting.pop(tag)
        task = asyncio.ensure_future(_requeue(incoming))
        self.requeues.add(task)
        task.add_done_callback(self.requeues.discard)

    async def dead_letter(self, message: Message, verdict: DeadLetter) -> None:
        incoming = message.raw
        if self.dead_letter_queue is None:
            await incoming.reject(requeue=False)
            return
        aio_pika = _aio_pika()
        headers = {**(incoming.headers or {}), DEAD_REASON: verdict.reason[:1000]}
        dead = aio_pika.Message(
            bytes(incoming.body),
            headers=headers,
            message_id=incoming.message_id,
            content_type=incoming.content_type,
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
        )
        await self.channel.default_exchange.publish(dead, routing_key=self.dead_letter_queue)
        await incoming.ack()

    async def give_back(self) -> None:
        """Requeue every retry still waiting, now, and wait for requeues under way."""
        for handle, incoming in list(self.waiting.values()):
            handle.cancel()
            await _requeue(incoming)
        self.waiting.clear()
        if self.requeues:
            await asyncio.gather(*self.requeues, return_exceptions=True)


async def _requeue(incoming: Any) -> None:
    with contextlib.suppress(Exception):  # a closed channel requeues it by itself
        await incoming.reject(requeue=True)


async def consume(
    consumer: IdempotentConsumer,
    url: str,
    *,
    queue: str,
    stop: asyncio.Event,
    prefetch: int = 10,
    dead_letter_queue: str | None = None,
    **options: Any,
) -> None:
    """Consume ``queue`` until ``stop`` is set; ``options`` go to ``aio_pika.connect``."""
    if prefetch < 1:
        raise ConfigurationError(f"prefetch must be at least 1: {prefetch!r}")
    connection = await _aio_pika().connect(url, **options)
    try:
        channel, source = await _queue(connection, queue)
        await channel.set_qos(prefetch_count=prefetch)
        if dead_letter_queue is not None:
            await channel.declare_queue(dead_letter_queue, durable=True)
        inbox: asyncio.Queue[Any] = asyncio.Queue()
        settler = _Settler(channel, dead_letter_queue)
        tag = await source.consume(inbox.put, no_ack=False)
        try:
            await _loop(consumer, inbox, settler, stop)
        finally:
            with contextlib.suppress(Exception):
                await source.cancel(tag)
            while not inbox.empty():  # delivered, never started: straight back to the queue
                await _requeue(inbox.get_nowait())
            await settler.give_back()
    finally:
        await connection.close()


async def _loop(
    consumer: IdempotentConsumer, inbox: asyncio.Queue[Any], settler: _Settler, stop: asyncio.Event
) -> None:
    stopping = asyncio.ensure_future(stop.wait())
    try:
        while not stop.is_set():
            getting = asyncio.ensure_future(inbox.get())
            await asyncio.wait({getting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not getting.done():
                getting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await getting
                if getting.cancelled():
                    break
            batch = [getting.result()]
            while not inbox.empty():
                batch.append(inbox.get_nowait())
            messages = [message_of(m) for m in batch]
            if len(messages) == 1:
                verdicts = [await consumer.handle(messages[0])]
            else:
                verdicts = await consumer.handle_batch(messages)
            await settler.settle(messages, verdicts)
    finally:
        stopping.cancel()
