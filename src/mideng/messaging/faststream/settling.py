"""How each FastStream broker carries out the consumer's verdicts, through FastStream's own
message (``StreamMessage.ack`` / ``nack`` / ``reject``) and broker (``publish``).

What differs per broker is what mideng's own adapters do differently
(``mideng.messaging.<broker>.consume``):

- RabbitMQ: an Ack is a ``basic.ack``; a Retry holds the delivery unacked for its delay, then
  rejects it with requeue; a dead letter is copied to the queue and acked, or, with no copy,
  rejected without requeue (to the queue's dead-letter exchange, if it has one).
- NATS JetStream: ack; a Retry is a nak with the delay; a dead letter is copied to the subject
  and acked, or terminated (``term``).
- Kafka: an Ack commits (under ``AckPolicy.ACK``); a Retry runs the record again here after the
  delay (the partition waits, in order, as mideng's adapter pauses it); a dead letter is
  copied to the topic, and committed past.
- Redis: an Ack is an XACK (a stream's group); a Retry runs again here after the delay; a dead
  letter is copied to a stream, and XACKed (rejected, it would stay pending).
- Any other broker: ``ack()``; a Retry runs again here; a dead letter is copied and acked, or
  ``reject()``-ed.

A broker that cannot be handed a message back (Kafka: only an offset; Redis: a pending entry
comes back only to a claim; a list or a channel, core NATS, a message FastStream settled before
the handler, as ``AckPolicy.ACK_FIRST`` does) has the message run again in place after the
delay: never lost, never a busy loop. Every dead letter's reason is logged by the consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from mideng.messaging.headers import text_headers
from mideng.messaging.message import Message

#: The header a dead-letter copy carries its reason in (RabbitMQ's as mideng's adapter names
#: it: ``x-dead-reason``).
DEAD_LETTER_REASON = "x-dead-letter-reason"


class Settling:
    """A broker's way with verdicts; this base is what any FastStream broker can do:
    acked, run again in place, a copy published with ``broker.publish(body, destination)``,
    given up with ``reject()``."""

    reason_header = DEAD_LETTER_REASON

    def message(self, msg: Any) -> Message:
        """The delivery as the consumer reads it; ``raw`` is FastStream's message."""
        body = msg.body
        if not isinstance(body, bytes | bytearray):
            raise TypeError(
                f"{type(msg).__name__} holds a batch; an idempotent subscriber takes one "
                "message at a time"
            )
        headers = text_headers(msg.headers.items())
        return Message(bytes(body), headers, msg.message_id, self.attempt(msg), msg)

    def attempt(self, msg: Any) -> int | None:
        return None

    def hands_back(self, msg: Any) -> bool:
        """Whether the broker takes this message back to deliver it again later."""
        return False

    async def hand_back(self, msg: Any, delay: float, held: set[asyncio.Task[None]]) -> None:
        raise NotImplementedError  # only called where hands_back said yes

    async def give_up(self, msg: Any) -> None:
        """Never deliver it again (its copy, if any, is made)."""
        await msg.reject()

    async def copy(
        self, broker: Any, msg: Any, destination: str, reason: str, options: Mapping[str, Any]
    ) -> None:
        headers = {**text_headers(msg.headers.items()), self.reason_header: reason}
        await self.publish(broker, msg.body, destination, headers, options)

    async def publish(
        self,
        broker: Any,
        body: bytes,
        destination: str,
        headers: dict[str, str],
        options: Mapping[str, Any],
    ) -> None:
        """The copy, sent: ``destination`` is the broker's first argument after the body."""
        await broker.publish(body, destination, headers=headers, **options)


class RabbitSettling(Settling):
    """aio-pika under FastStream: a Retry holds the delivery unacked for its delay and then
    rejects it with requeue (RabbitMQ has no delayed requeue of its own), as mideng's adapter
    does; a copy is persistent and counts only once the broker confirmed it routed."""

    reason_header = "x-dead-reason"

    def attempt(self, msg: Any) -> int | None:
        count = (msg.raw_message.headers or {}).get("x-delivery-count")
        return count + 1 if isinstance(count, int) and not isinstance(count, bool) else None

    def hands_back(self, msg: Any) -> bool:
        return msg.committed is None

    async def hand_back(self, msg: Any, delay: float, held: set[asyncio.Task[None]]) -> None:
        task = asyncio.ensure_future(_requeue_after(msg, delay))
        held.add(task)  # kept until it ran: a task nothing holds may be collected
        task.add_done_callback(held.discard)

    async def give_up(self, msg: Any) -> None:
        await msg.reject(requeue=False)  # to the queue's dead-letter exchange, if it has one

    async def copy(
        self, broker: Any, msg: Any, destination: str, reason: str, options: Mapping[str, Any]
    ) -> None:
        import aiormq

        raw = msg.raw_message
        headers = {**(raw.headers or {}), self.reason_header: reason[:1000]}
        confirmed = await broker.publish(
            msg.body,
            queue=destination,
            headers=headers,
            message_id=raw.message_id,
            content_type=raw.content_type,
            persist=True,
            **options,
        )
        if not isinstance(confirmed, aiormq.spec.Basic.Ack):
            # Returned unroutable (no such queue) or nacked: no copy, so no ack either.
            raise RuntimeError(f"the broker did not route the copy: {confirmed!r}")


async def _requeue_after(msg: Any, delay: float) -> None:
    await asyncio.sleep(delay)
    # A channel closed meanwhile has requeued the delivery itself.
    with contextlib.suppress(Exception):
        await msg.reject(requeue=True)


class NatsSettling(Settling):
    """JetStream: a Retry is a nak with the delay, a dead letter a term; core NATS keeps no
    message to hand back."""

    def attempt(self, msg: Any) -> int | None:
        return int(msg.raw_message.metadata.num_delivered) if _jetstream(msg) else None

    def hands_back(self, msg: Any) -> bool:
        return _jetstream(msg) and msg.committed is None

    async def hand_back(self, msg: Any, delay: float, held: set[asyncio.Task[None]]) -> None:
        await msg.nack(delay=delay)

    async def give_up(self, msg: Any) -> None:
        if _jetstream(msg):
            await msg.reject()  # term


def _jetstream(msg: Any) -> bool:
    """A JetStream delivery: its reply subject is JetStream's ack subject."""
    reply = msg.raw_message.reply or ""
    return bool(reply.startswith("$JS.ACK."))


class RedisSettling(Settling):
    """A stream's group entry is acked (XACK) when given up on: rejected, it stayed pending; a
    copy goes to a stream."""

    async def give_up(self, msg: Any) -> None:
        await msg.ack()

    async def publish(
        self,
        broker: Any,
        body: bytes,
        destination: str,
        headers: dict[str, str],
        options: Mapping[str, Any],
    ) -> None:
        await broker.publish(body, stream=destination, headers=headers, **options)


#: Each FastStream broker's messages by the module that defines them; a broker not named here
#: (Confluent, MQTT) gets the base ``Settling``. Kafka's is the base: a retry runs in place,
#: ``reject()`` commits past the record.
BY_MODULE: dict[str, Settling] = {
    "faststream.rabbit.message": RabbitSettling(),
    "faststream.nats.message": NatsSettling(),
    "faststream.kafka.message": Settling(),
    "faststream.redis.message": RedisSettling(),
}
ANY_BROKER = Settling()


def settling_for(msg: Any) -> Settling:
    """The settling of ``msg``'s broker: found from its class (or a class it derives from)."""
    for cls in type(msg).__mro__:
        found = BY_MODULE.get(cls.__module__)
        if found is not None:
            return found
    return ANY_BROKER
