"""The broker under test: what the base suite asks of one broker, and the consumers and
counts its scenarios share.

A broker's package gives one subclass of ``Broker`` on names of the test's own (a queue, a
stream and its group, a durable, a topic): how to publish, the adapter's keyword arguments,
what is left on the broker, what was dead-lettered, and a connection the test can drop. The
storm helpers (tests/helpers/storm.py) take the same object as their ``Side``.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import pytest

from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message, Verdict
from mideng.messaging.headers import IDEMPOTENCY_KEY
from mideng.stores.memory import MemoryStore
from tests.helpers.storm import wait_for

#: An adapter's consume, called and not yet awaited.
Consuming = Coroutine[Any, Any, None]

#: One message to publish: its business key (None: a message without one) and its body.
Outgoing = tuple[str | None, bytes]


@dataclass(frozen=True)
class DeadCopy:
    """A dead letter's copy as the broker's own client reads it back."""

    key: str | None  # its idempotency-key header, as text
    reason: str  # the header the adapter adds with the dead-letter reason
    body: bytes
    headers: Any  # every header, in the client's own form (a dict, a list of pairs ...)
    raw: Any  # the client's own message


class Link(ABC):
    """A consumer's connection the test can drop for real while the consumer lives.
    ``broker`` is where that consumer's messages are published and looked for (a broker of
    its own where the connection has to go through a proxy from the start)."""

    broker: Broker

    @abstractmethod
    def consume(self, consumer: Any, stop: asyncio.Event, **options: Any) -> Consuming:
        """The adapter's consume, through this connection, with a quick reconnect."""

    @abstractmethod
    def drop(self, waiting: bool = False) -> int:
        """Drop the consumer's connection (only while it waits for deliveries, if
        ``waiting``); how many were dropped. Called off the event loop: from a def handler,
        or through ``asyncio.to_thread``."""


class Broker(ABC):
    """One broker on fresh names, as the base suite drives it."""

    #: The adapter's module under mideng.messaging (what the storm worker runs).
    broker: str
    url: str
    #: The storm consumers' lease (a stream's take-over of a killed member waits that long).
    lease: float
    #: The adapter hands messages over in the order they were published: one queue or
    #: stream (Kafka keeps the order of each partition only).
    ordered: bool = True
    #: The adapter reads and decides the next batch while one is being decided, so a stop
    #: settles both (Redis Streams).
    reads_ahead: bool = False
    #: How the adapter logs a dropped connection: a ``connection_lost`` line each, then a
    #: ``reconnected`` line for ``each`` drop (every new session reports one), for ``some``
    #: (two drops in a row before a step works report one), or ``none`` at all (aiokafka
    #: reconnects on its own, without a word to the adapter).
    reconnect_lines: str = "each"
    #: The adapter fetches what is there as one batch; RabbitMQ pushes deliveries, and a
    #: batch is whatever arrived by the time the last one was decided.
    fetches: bool = True

    @abstractmethod
    def publish(
        self, messages: Sequence[Outgoing], headers: Mapping[str, str] | None = None
    ) -> list[str]:
        """Each (key, body) as a new message, the key in the idempotency-key header, with
        ``headers`` besides; the ids the adapter will give them (``Message.id``)."""

    @abstractmethod
    def publish_headers(self, *messages: Any) -> list[str]:
        """One message for each set of headers (in the client's own form), each value
        written as a client in another language writes it (bytes as bytes, floats as
        doubles), with no business key unless one of them is; their ids, where the broker
        tells them."""

    def publish_batch(self, messages: Sequence[Outgoing]) -> list[str]:
        """``publish``, so that they are fetched together (Kafka: on one partition)."""
        return self.publish(messages)

    @abstractmethod
    def adapter(self, slot: int = 0) -> dict[str, Any]:
        """The adapter's keyword arguments for the consumer in ``slot`` (a storm's worker)."""

    @abstractmethod
    def consume(self, consumer: Any, stop: asyncio.Event, **options: Any) -> Consuming:
        """The adapter's consume on these names, ``options`` over ``adapter()``'s."""

    @abstractmethod
    def dead_letter_options(self) -> dict[str, Any]:
        """consume's options that copy dead letters to a destination of this test's."""

    @abstractmethod
    def dead_letters(self, at_least: int = 1) -> list[DeadCopy]:
        """The copies at that destination, oldest first; a broker that cannot tell it read
        all of them waits for ``at_least``."""

    @abstractmethod
    def unsettled(self) -> int:
        """Messages published and not settled yet (ready, pending, unacked, uncommitted) as
        far as the broker tells while a consumer holds them; once consume returned, all."""

    @abstractmethod
    def droppable(self) -> AbstractAsyncContextManager[Link]:
        """A connection of the consumer's that the test can drop."""

    def settled(self) -> bool:
        return self.unsettled() == 0

    def delivered(self) -> bool:
        """Every message published has reached the consumer's hands: pushed into its prefetch
        (RabbitMQ). An adapter that fetches holds none it did not ask for."""
        return True

    def state(self) -> str:
        """What the broker holds, for a failure's message."""
        return f"{self.unsettled()} unsettled"

    def until_settled(self, timeout: float = 30.0) -> None:
        wait_for(self.settled, timeout, f"nothing left on the broker ({self.state()})", 0.1)

    async def asettled(self) -> bool:
        return await asyncio.to_thread(self.settled)


def keyed(*keys: str | None, body: bytes = b"{}") -> list[Outgoing]:
    return [(key, body) for key in keys]


def key(message: Message) -> str:
    found: str = message.headers[IDEMPOTENCY_KEY]
    return found


class Runs:
    """A consumer over one store (memory unless given), counting its handler's runs per key
    and noting the reason of each dead letter."""

    def __init__(self, store: Any = None, **options: Any) -> None:
        self.counted: Counter[str] = Counter()
        self.messages: list[Message] = []
        self.dead: list[str] = []
        self.store = store if store is not None else MemoryStore()
        self.guard = Guard(self.store, lease=options.pop("lease", 30))
        options.setdefault("on_dead_letter", self.dead_lettered)
        self.consumer = IdempotentConsumer(self.guard, "stock", self.handle, **options)

    def handle(self, message: Message) -> None:
        self.messages.append(message)
        self.counted.update([key(message)])

    def dead_lettered(self, message: Message, reason: str) -> None:
        self.dead.append(reason)

    def keys(self) -> list[str]:
        return [key(m) for m in self.messages]


class Recording:
    """A consumer, noting each batch the adapter hands it and each verdict it answers."""

    def __init__(self, inner: IdempotentConsumer) -> None:
        self.inner = inner
        # What an adapter reads of a consumer: its lease; whether it is transactional (Redis
        # Streams then decides one batch at a time).
        self.policy, self.engine = inner.policy, inner.engine
        self.batches: list[list[str | None]] = []
        self.verdicts: list[Verdict] = []

    async def handle(self, message: Message) -> Verdict:
        return (await self.handle_batch([message]))[0]

    async def handle_batch(self, messages: Sequence[Message]) -> list[Verdict]:
        self.batches.append([m.id for m in messages])
        if len(messages) == 1:
            verdicts = [await self.inner.handle(messages[0])]
        else:
            verdicts = await self.inner.handle_batch(messages)
        self.verdicts.extend(verdicts)
        return verdicts

    def ids(self) -> list[str | None]:
        return [i for batch in self.batches for i in batch]


def outcomes(caplog: pytest.LogCaptureFixture, outcome: str) -> int:
    """The log records of one mideng outcome (``connection_lost``, ``replay`` ...)."""
    return sum(1 for r in caplog.records if getattr(r, "mideng_outcome", None) == outcome)


async def until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``condition`` on the loop until it holds, failing after ``timeout``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.05)
