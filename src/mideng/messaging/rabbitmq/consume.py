"""RabbitMQ's adapter (aio-pika): manual acks, after the consumer decided.

    await rabbitmq.consume(consumer, "amqp://guest:guest@localhost/", queue="orders", stop=stop)

The queue is used as it is if it exists (its arguments, such as a dead-letter exchange, are
the operator's); otherwise it is declared durable. ``prefetch`` messages are in flight at
most; when more than one is waiting they are decided as one batch (one claim round trip),
and the batch's acks go out as one ``basic.ack`` with ``multiple`` set unless a Retry still
holds a delivery below them (see ``_Settler``). An Ack acks; a Retry holds the message for
its delay, then rejects it with requeue (RabbitMQ has no delayed requeue of its own), so it
is redelivered; a DeadLetter either publishes the message to ``dead_letter_queue`` (declared
durable, the reason in the ``x-dead-reason`` header) and acks it once the broker confirmed
the copy routed, or, without one, rejects it without requeue, which routes it to the
queue's dead-letter exchange when it has one (the delivery as a Message, and its copy:
``rabbitmq.message``).

When ``stop`` is set the consumer is cancelled (no new deliveries), the batch in hand is
finished, messages delivered but not started and retries still waiting go back to the queue,
and the call returns.

A closed connection or channel (the broker restarted, an operator closed it, the network
dropped, a channel error closed the channel alone) does not end the call: it is logged and,
after a bounded exponential backoff that ``stop`` cuts short, the adapter connects again. The
broker has requeued every delivery the closed channel held unacked, so one whose handler
finished before its ack was lost comes back and is acked without running again. A consumer
the broker cancelled (its queue deleted) ends the session the same way, and the next one
declares the queue again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from mideng.errors import ConfigurationError
from mideng.messaging.consumer import Consumer, decide
from mideng.messaging.message import Message
from mideng.messaging.rabbitmq.message import dead_copy, message_of
from mideng.messaging.reconnect import Backoff
from mideng.messaging.verdict import Ack, DeadLetter, Retry, Verdict
from mideng.observability import logs
from mideng.stores.registry import require

#: Seconds before a message whose dead-letter copy the broker refused is requeued.
COPY_RETRY_DELAY = 1.0


async def _queue(connection: Any, name: str) -> tuple[Any, Any]:
    """The channel and the queue: the existing one as configured, else a new durable one.

    A publish on the channel that the broker returns unroutable raises PublishError: a
    dead-letter copy counts only once the broker has routed it (confirmed and not returned).
    """
    channel = await connection.channel(on_return_raises=True)
    try:
        return channel, await channel.declare_queue(name, passive=True)
    except Exception as exc:
        if "NOT_FOUND" not in str(exc) and type(exc).__name__ != "ChannelNotFoundEntity":
            raise
    with contextlib.suppress(Exception):
        await channel.close()  # the broker closed it on the failed passive declare
    channel = await connection.channel(on_return_raises=True)
    return channel, await channel.declare_queue(name, durable=True)


async def _declare_aside(connection: Any, name: str) -> None:
    """Declare the queue ``name`` as ``_queue`` does, on a channel of its own, closed after."""
    side, _ = await _queue(connection, name)
    with contextlib.suppress(Exception):
        await side.close()


class _Settler:
    """Carries out verdicts on one channel; a Retry's delayed requeue is a timer it owns.

    A batch's acks go out as one ``basic.ack`` with ``multiple`` set where that is exact: it
    acks every unacked delivery of the channel up to its tag, and the only unacked deliveries
    below a batch's tags are ones a Retry holds for its delay (batches are settled in
    delivery order, and those still in the inbox came later). So the acks below the lowest
    held tag are one frame; any above it are acked one by one. A held tag stays held until
    its requeue has been sent, not only until its timer fired."""

    def __init__(self, channel: Any, dead_letter_queue: str | None, connection: Any = None) -> None:
        self.channel = channel
        self.dead_letter_queue = dead_letter_queue
        self.connection = connection  # the dead-letter queue's, declared again on it if gone
        self.waiting: dict[int, tuple[asyncio.TimerHandle, Any]] = {}
        self.held: set[int] = set()  # delivery tags a Retry keeps unacked, until requeued
        self.requeues: set[asyncio.Task[None]] = set()

    async def settle(self, messages: Sequence[Message], verdicts: Sequence[Verdict]) -> None:
        acks: list[Any] = []
        for message, verdict in zip(messages, verdicts, strict=True):
            incoming = message.raw
            if isinstance(verdict, Ack):
                acks.append(incoming)
            elif isinstance(verdict, Retry):
                self._later(incoming, verdict.delay)
            else:
                await self.dead_letter(message, verdict)
        if acks:
            await self._ack(acks)

    async def _ack(self, acks: list[Any]) -> None:
        below, above = acks, []
        if self.held:
            bound = min(self.held)
            below = [m for m in acks if m.delivery_tag < bound]
            above = [m for m in acks if m.delivery_tag >= bound]
        if len(below) == 1:
            await below[0].ack()
        elif below:
            await max(below, key=_tag).ack(multiple=True)
        for incoming in above:
            await incoming.ack()

    def _later(self, incoming: Any, delay: float) -> None:
        tag = incoming.delivery_tag
        loop = asyncio.get_running_loop()
        handle = loop.call_later(delay, self._requeue_now, tag)
        self.waiting[tag] = (handle, incoming)
        self.held.add(tag)

    def _requeue_now(self, tag: int) -> None:
        _handle, incoming = self.waiting.pop(tag)
        task = asyncio.ensure_future(self._requeue(incoming))
        self.requeues.add(task)
        task.add_done_callback(self.requeues.discard)

    async def _requeue(self, incoming: Any) -> None:
        # A reject that failed leaves the delivery unacked on the channel until it closes
        # (which requeues it): still held, or a later multiple ack would take it as done.
        if await _requeue(incoming):
            self.held.discard(incoming.delivery_tag)

    async def dead_letter(self, message: Message, verdict: DeadLetter) -> None:
        incoming = message.raw
        if self.dead_letter_queue is None:
            await incoming.reject(requeue=False)
            return
        dead = dead_copy(incoming, verdict.reason)
        try:
            await self.channel.default_exchange.publish(dead, routing_key=self.dead_letter_queue)
        except _connection_errors():
            raise  # the session ends; the broker requeues what the channel held
        except Exception as exc:
            # The broker refused the copy (a nack: the dead-letter queue full with
            # reject-publish, say) or returned it unroutable (the queue deleted since). Never
            # acked without its copy: requeued after a pause, the message comes back and is
            # dead-lettered again, and the consumer goes on. Raised, the error ended consume,
            # and again at every restart.
            logs.rabbitmq_dead_letter_copy_failed(self.dead_letter_queue, message.id, exc)
            self._later(incoming, COPY_RETRY_DELAY)
            if isinstance(exc, require("aio_pika", "rabbitmq").exceptions.PublishError):
                # No queue of that name: declared again, as at the start, for the next try.
                await _declare_aside(self.connection, self.dead_letter_queue)
            return
        await incoming.ack()

    def forget(self) -> None:
        """Drop the retries waiting on a closed channel (the broker has requeued them)."""
        for handle, _incoming in self.waiting.values():
            handle.cancel()
        self.waiting.clear()
        self.held.clear()

    async def give_back(self) -> None:
        """Requeue every retry still waiting, now, and wait for requeues under way."""
        for handle, incoming in list(self.waiting.values()):
            handle.cancel()
            await self._requeue(incoming)
        self.waiting.clear()
        if self.requeues:
            await asyncio.gather(*self.requeues, return_exceptions=True)


def _tag(incoming: Any) -> int:
    return int(incoming.delivery_tag)


async def _requeue(incoming: Any) -> bool:
    """Reject with requeue; whether the reject was sent (a closed channel requeues it by
    itself, so a failure is not raised)."""
    try:
        await incoming.reject(requeue=True)
    except Exception:
        return False
    return True


async def consume(
    consumer: Consumer,
    url: str,
    *,
    queue: str,
    stop: asyncio.Event,
    prefetch: int = 10,
    dead_letter_queue: str | None = None,
    reconnect: Backoff | None = None,
    **options: Any,
) -> None:
    """Consume ``queue`` until ``stop`` is set; ``options`` go to ``aio_pika.connect``. A lost
    connection is retried with ``reconnect`` (a bounded exponential backoff, 0.1 s doubling
    to 5 s, unless given)."""
    if prefetch < 1:
        raise ConfigurationError(f"prefetch must be at least 1: {prefetch!r}")
    backoff = reconnect if reconnect is not None else Backoff()
    session_ends: tuple[type[BaseException], ...] = (
        *_connection_errors(),
        ConsumerCancelled,
        ChannelLost,
    )
    while not stop.is_set():
        session = _Session(queue, prefetch, dead_letter_queue)
        try:
            await session.run(consumer, url, stop, options, lambda: _consuming(backoff, queue))
        except session_ends as exc:
            # The broker requeued every unacked delivery of the closed channel: a finished
            # one comes back as a duplicate and is acked without running.
            delay = backoff.failed()
            if isinstance(exc, ConsumerCancelled):
                logs.rabbitmq_consumer_cancelled(queue, backoff.failures, delay)
            elif isinstance(exc, ChannelLost):
                logs.rabbitmq_channel_closed(queue, backoff.failures, delay, exc)
            else:
                logs.rabbitmq_connection_lost(queue, backoff.failures, delay, exc)
            await backoff.wait(delay, stop)
            continue


def _consuming(backoff: Backoff, queue: str) -> None:
    if failures := backoff.reset():
        logs.rabbitmq_reconnected(queue, failures)


def _connection_errors() -> tuple[type[BaseException], ...]:
    """What a closed connection or channel, or an unreachable broker, raises."""
    import aiormq.exceptions as amqp

    return (
        amqp.AMQPConnectionError,
        amqp.ChannelInvalidStateError,
        amqp.AMQPChannelError,
        ConnectionLost,
        OSError,
    )


class ConnectionLost(Exception):
    """The broker closed the connection while the consumer waited for deliveries."""


class ConsumerCancelled(Exception):
    """The broker cancelled the consumer (its queue deleted, say) while the connection held."""


class ChannelLost(Exception):
    """The broker closed the consumer's channel (a channel error) while the connection held."""


class _Session:
    """One connection's consumer: set up, deliveries decided and settled, torn down."""

    def __init__(self, queue: str, prefetch: int, dead_letter_queue: str | None) -> None:
        self.queue, self.prefetch, self.dead_letter_queue = queue, prefetch, dead_letter_queue

    async def run(
        self,
        consumer: Consumer,
        url: str,
        stop: asyncio.Event,
        options: Any,
        consuming: Callable[[], None],
    ) -> None:
        connection = await require("aio_pika", "rabbitmq").connect(url, **options)
        ended: asyncio.Future[Exception] = asyncio.get_running_loop().create_future()
        connection.close_callbacks.add(
            lambda *_: _end(ended, ConnectionLost("the broker closed the connection"))
        )
        try:
            channel, source = await _queue(connection, self.queue)
            await self._end_with_channel(channel, ended)
            await channel.set_qos(prefetch_count=self.prefetch)
            if self.dead_letter_queue is not None:
                # As the queue: an operator's own (a quorum queue, a length limit) is used as
                # it is. Declared with other arguments, the broker refused it and closed the
                # channel, and every session failed at its start.
                await _declare_aside(connection, self.dead_letter_queue)
            inbox: asyncio.Queue[Any] = asyncio.Queue()
            settler = _Settler(channel, self.dead_letter_queue, connection)
            tag = await source.consume(inbox.put, no_ack=False)
            consuming()
            try:
                await _loop(consumer, inbox, settler, stop, ended)
            except BaseException as exc:
                settler.forget()  # the channel is gone or going: the broker requeues them
                if ended.done() and isinstance(exc, _connection_errors()):
                    # Why the session ended (the broker closed the channel, or the
                    # connection), not the ack that then met the channel closed.
                    raise ended.result() from exc
                raise
            finally:
                if not connection.is_closed:
                    with contextlib.suppress(Exception):
                        await source.cancel(tag)
                    while not inbox.empty():  # delivered, never started: back to the queue
                        await _requeue(inbox.get_nowait())
                    await settler.give_back()
        finally:
            await connection.close()

    async def _end_with_channel(self, channel: Any, ended: asyncio.Future[Exception]) -> None:
        """End the session, as a closed connection does, when no delivery can come on its
        channel any more: the broker cancelled its consumer (the queue deleted, say) or closed
        the channel with the connection up (a channel error: a delivery unacked past the
        consumer timeout, an ack of a tag it does not know, a failed declare on it). The next
        session declares the queue again as this one did. Waiting on, the consumer stopped for
        good."""
        import aiormq.exceptions as amqp

        cancelled = ConsumerCancelled(f"the broker cancelled the consumer of {self.queue!r}")
        underlay = await channel.get_underlay_channel()
        # The channel's only consumer is this session's; registered before it exists, so a
        # cancel that comes at once is not missed.
        underlay.on_consumer_cancel_callbacks.add(lambda _frame: _end(ended, cancelled))

        def closed(_channel: Any, exc: BaseException | None) -> None:
            # A channel closed with its connection is the connection's close callback's to
            # report; this one is for a channel error, the connection still up.
            if isinstance(exc, amqp.AMQPChannelError):
                _end(ended, ChannelLost(f"the broker closed the channel: {exc}"))

        channel.close_callbacks.add(closed)


def _end(ended: asyncio.Future[Exception], reason: Exception) -> None:
    """The first reason the session ended is the one it raises."""
    if not ended.done():
        ended.set_result(reason)


async def _loop(
    consumer: Consumer,
    inbox: asyncio.Queue[Any],
    settler: _Settler,
    stop: asyncio.Event,
    ended: asyncio.Future[Exception],
) -> None:
    stopping = asyncio.ensure_future(stop.wait())
    try:
        while not stop.is_set():
            getting = asyncio.ensure_future(inbox.get())
            await asyncio.wait({getting, stopping, ended}, return_when=asyncio.FIRST_COMPLETED)
            if not getting.done():
                getting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await getting
                if getting.cancelled():
                    if ended.done():
                        # Without this the consumer would wait for deliveries for good.
                        raise ended.result()
                    break
            batch = [getting.result()]
            while not inbox.empty():
                batch.append(inbox.get_nowait())
            messages = [message_of(m) for m in batch]
            await settler.settle(messages, await decide(consumer, messages))
    finally:
        stopping.cancel()
