"""``IdempotentMiddleware``: an ``IdempotentConsumer`` in front of every subscriber of a
FastStream broker or router (Kafka, RabbitMQ, NATS, Redis).

    router = RabbitRouter(middlewares=[IdempotentMiddleware(guard, "stock")])

    @router.subscriber("orders")
    async def reserve(order: Order) -> None: ...

Each message goes to the consumer (mideng.messaging.consumer) with the subscriber's handler as
its handler: FastStream's parsing, dependencies and the function itself run only when the key
is claimed, and the verdict is carried out by the broker's settling (``settling``). A run's
return value goes on to FastStream (a reply, ``@publisher``); a duplicate is acked without
running, and nothing is published for it.

With ``engine=`` the handler runs inside the dedup record's transaction, and the connection
is in FastStream's context under ``CONNECTION``:

    async def reserve(order: Order, conn: Connection) -> None: ...   # Context(CONNECTION)

An AsyncEngine awaits the handler on the loop; an Engine runs the transaction off the loop,
and the handler on it (a ``def`` handler then uses the connection from the loop's thread while
the transaction's thread waits for it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Annotated, Any

from faststream import BaseMiddleware, Context
from faststream.exceptions import AckMessage, NackMessage, RejectMessage, SkipMessage

from mideng.guard.driver import Driver
from mideng.messaging.consumer import IdempotentConsumer
from mideng.messaging.faststream.settling import Settling, settling_for
from mideng.messaging.keys import KeyFn
from mideng.messaging.message import Message
from mideng.messaging.verdict import Ack, DeadLetter, Retry, Verdict
from mideng.observability import logs

#: The context name a transactional handler finds its connection under.
CONNECTION = "mideng_connection"
#: A handler's parameter for it: ``conn: Connection``.
Connection = Annotated[Any, Context(CONNECTION)]

#: Seconds before a message whose dead-letter copy was refused comes back.
COPY_RETRY_DELAY = 1.0


class _Run:
    """One message's FastStream handler, as the consumer's handler calls it."""

    __slots__ = ("call_next", "context", "loop", "msg", "result")

    def __init__(self, call_next: Any, msg: Any, context: Any) -> None:
        self.call_next, self.msg, self.context = call_next, msg, context
        self.loop = asyncio.get_running_loop()
        self.result: Any = None

    async def __call__(self, conn: Any = None) -> None:
        if conn is None:
            self.result = await self.call_next(self.msg)
            return
        with self.context.scope(CONNECTION, conn):
            self.result = await self.call_next(self.msg)


#: The message in hand: the consumer calls its handler with a ``Message``; this is the
#: FastStream handler behind it.
_RUN: ContextVar[_Run] = ContextVar("mideng_faststream_run")


async def _handler(message: Message) -> None:
    await _RUN.get()()


async def _handler_in_transaction(message: Message, conn: Any) -> None:
    await _RUN.get()(conn)


def _handler_on_connection(message: Message, conn: Any) -> None:
    # In the transaction's thread (an Engine): the handler runs on the loop, with the
    # connection this thread's transaction holds; this thread waits for it.
    run = _RUN.get()
    asyncio.run_coroutine_threadsafe(run(conn), run.loop).result()


class IdempotentMiddleware:
    """A FastStream middleware (``Broker(middlewares=[...])``, ``Router(middlewares=[...])``):
    one run per business key for every subscriber it is given to.

    ``guard``, ``scope``, ``key`` and the other options are ``IdempotentConsumer``'s
    (``max_attempts``, ``retry_delay``, ``in_flight_delay``, ``on_dead_letter``, the scope's
    policy); ``key`` gets a ``Message`` whose ``raw`` is FastStream's message. ``engine``: the
    transactional variant (the module's doc). ``dead_letter``: where a copy of a dead letter
    goes (a queue, a subject, a topic, a stream), published through the subscriber's broker
    with ``dead_letter_options``; without it the message is given up as its broker does
    (``settling``)."""

    def __init__(
        self,
        guard: Driver,
        scope: str,
        *,
        key: KeyFn | None = None,
        engine: Any = None,
        dead_letter: str | None = None,
        dead_letter_options: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        if engine is None:
            handler: Any = _handler
        elif hasattr(engine, "sync_engine"):
            handler = _handler_in_transaction
        else:
            handler = _handler_on_connection
        self.consumer = IdempotentConsumer(guard, scope, handler, key=key, engine=engine, **options)
        self.dead_letter = dead_letter
        self.dead_letter_options = dict(dead_letter_options or {})
        self.held: set[asyncio.Task[None]] = set()  # RabbitMQ's retries, waiting out their delay

    def __call__(self, msg: Any, /, *, context: Any) -> IdempotentScope:
        return IdempotentScope(msg, context=context, middleware=self)


class IdempotentScope(BaseMiddleware[Any, Any]):
    """One message through the middleware."""

    def __init__(self, msg: Any, /, *, context: Any, middleware: IdempotentMiddleware) -> None:
        super().__init__(msg, context=context)
        self.middleware = middleware

    async def consume_scope(self, call_next: Any, msg: Any) -> Any:
        settling = settling_for(msg)
        consumer = self.middleware.consumer
        message = settling.message(msg)
        run = _Run(call_next, msg, self.context)
        token = _RUN.set(run)
        try:
            verdict = await consumer.handle(message)
            while True:
                if isinstance(verdict, DeadLetter):
                    verdict = await self._dead_letter(settling, msg, verdict)
                if not isinstance(verdict, Retry):
                    break
                if settling.hands_back(msg):
                    await settling.hand_back(msg, verdict.delay, self.middleware.held)
                    # Settled (NATS), or settled later (RabbitMQ): FastStream does nothing.
                    raise NackMessage() if msg.committed is not None else SkipMessage()
                # The broker keeps no message to give back: it runs again here.
                await asyncio.sleep(verdict.delay)
                verdict = await consumer.handle(message)
        finally:
            _RUN.reset(token)
        return await _settled(msg, verdict, run)

    async def _dead_letter(self, settling: Settling, msg: Any, verdict: DeadLetter) -> Verdict:
        """Copied (when the middleware names a place) and given up; a refused copy comes back
        as a Retry: never given up without its copy."""
        destination = self.middleware.dead_letter
        if destination is not None:
            broker = self.context.get("broker")
            options = self.middleware.dead_letter_options
            try:
                await settling.copy(broker, msg, destination, verdict.reason, options)
            except Exception as exc:
                logs.faststream_dead_letter_copy_failed(destination, msg.message_id, exc)
                return Retry(COPY_RETRY_DELAY, f"dead-letter copy refused: {exc!r}")
            await msg.ack()
        else:
            await settling.give_up(msg)
        raise RejectMessage()


async def _settled(msg: Any, verdict: Verdict, run: _Run) -> Any:
    """An Ack: the message acked once its record is complete (a copy, unrun: nothing goes
    on to FastStream's publishers)."""
    assert isinstance(verdict, Ack)
    await msg.ack()
    if not verdict.ran:
        raise AckMessage()
    return run.result
