"""The in-process broker behind ``memory://`` URLs: named queues held in this process's memory.

    publisher = open_publisher("memory://shop")     # mideng.messaging.memory.publish
    await memory.consume(consumer, "memory://shop", queue="orders.paid", stop=stop)

It is a broker with a real broker's delivery rules, for one process: tests, a demo, a service
that runs its relay and its consumers side by side. Every thread and event loop of the process
that names ``memory://shop`` reaches the same broker (``named``); another process reaches none
of it, and nothing outlives the process. A message is delivered at least once: a consumer takes
it (the delivery count goes up), then acks it (gone), requeues it (delivered again, at once or
after a delay) or drops it (a dead letter, copied first where the adapter was asked to). A
message taken and never settled, because its consumer stopped, was cancelled or raised, goes
back to its queue, as a broker requeues what a closed channel held unacked; that is the
redelivery a consumer that died before its ack sees on a real broker.

What it cannot be is durable or shared between processes: the outbox table is the durable
record (a relay publishes its rows again after a restart), and consumers in other processes
need a real broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from mideng.errors import ConfigurationError

SCHEME = "memory"


@dataclass(eq=False)
class Delivery:
    """One message on a queue. ``seq`` is its place in the queue (publish order);
    ``deliveries`` how many times a consumer took it; ``ready_at`` (monotonic seconds) when
    a requeued one may be taken again."""

    queue: str
    body: bytes
    headers: Mapping[str, str]
    message_id: str
    seq: int
    deliveries: int = 0
    ready_at: float = 0.0
    held: bool = field(default=False, repr=False)


class _Queue:
    def __init__(self) -> None:
        self.waiting: dict[int, Delivery] = {}  # by seq: not taken, or given back
        self.held: dict[int, Delivery] = {}  # taken, not settled
        self.woken: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []


class InProcessBroker:
    """Named queues, safe to use from any thread and any event loop of the process."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._queues: dict[str, _Queue] = {}
        self._seq = itertools.count(1)

    def _queue(self, name: str) -> _Queue:
        queue = self._queues.get(name)
        if queue is None:
            queue = self._queues[name] = _Queue()
        return queue

    def put(
        self, queue: str, body: bytes, headers: Mapping[str, str], message_id: str | None = None
    ) -> Delivery:
        """A new message at the end of ``queue``; its id is ``message_id``, else its place."""
        for name, value in headers.items():
            if not isinstance(name, str) or not isinstance(value, str):
                raise ConfigurationError(f"message headers are str -> str: {name!r}: {value!r}")
        with self._lock:
            seq = next(self._seq)
            delivery = Delivery(queue, bytes(body), dict(headers), message_id or str(seq), seq)
            found = self._queue(queue)
            found.waiting[seq] = delivery
            self._wake(found)
        return delivery

    def take(self, queue: str, limit: int) -> list[Delivery]:
        """Up to ``limit`` ready messages, oldest first, held for the taker until settled."""
        now = time.monotonic()
        with self._lock:
            found = self._queue(queue)
            ready = sorted(s for s, d in found.waiting.items() if d.ready_at <= now)[:limit]
            taken = [found.waiting.pop(seq) for seq in ready]
            for delivery in taken:
                delivery.deliveries += 1
                delivery.held = True
                found.held[delivery.seq] = delivery
        return taken

    def ack(self, delivery: Delivery) -> None:
        """Settled: the message is gone. Settling one twice is a no-op."""
        with self._lock:
            self._queue(delivery.queue).held.pop(delivery.seq, None)
            delivery.held = False

    def requeue(self, delivery: Delivery, delay: float = 0.0) -> None:
        """Back on its queue, in its place, to be taken again after ``delay`` seconds."""
        with self._lock:
            found = self._queue(delivery.queue)
            if found.held.pop(delivery.seq, None) is None:
                return  # settled already
            delivery.held = False
            delivery.ready_at = time.monotonic() + max(delay, 0.0)
            found.waiting[delivery.seq] = delivery
            self._wake(found)

    def unsettled(self, queue: str) -> int:
        """Messages on ``queue`` not yet acked: waiting (ready or delayed) and held."""
        with self._lock:
            found = self._queue(queue)
            return len(found.waiting) + len(found.held)

    def waiting(self, queue: str) -> list[Delivery]:
        """The messages waiting on ``queue``, in order, without taking them."""
        with self._lock:
            found = self._queue(queue)
            return [found.waiting[seq] for seq in sorted(found.waiting)]

    def _next_ready(self, queue: str) -> float | None:
        with self._lock:
            times = [d.ready_at for d in self._queue(queue).waiting.values()]
        return min(times) if times else None

    def _wake(self, queue: _Queue) -> None:
        """Wake every consumer waiting on ``queue`` (the lock is held)."""
        for loop, event in queue.woken:
            # A loop that closed has nobody waiting on it any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(event.set)
        queue.woken.clear()

    async def wait(self, queue: str, timeout: float, stop: asyncio.Event) -> None:
        """Until a message may be ready on ``queue`` (one put or requeued, or a delayed one's
        time came), ``stop`` is set, or ``timeout`` seconds passed."""
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()
        with self._lock:
            self._queue(queue).woken.append((loop, woken))
        ready_at = self._next_ready(queue)
        if ready_at is not None:
            timeout = min(timeout, max(ready_at - time.monotonic(), 0.0))
        waits = [asyncio.ensure_future(woken.wait()), asyncio.ensure_future(stop.wait())]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
            with self._lock:
                entries = self._queue(queue).woken
                if (loop, woken) in entries:
                    entries.remove((loop, woken))


_BROKERS: dict[str, InProcessBroker] = {}
_BROKERS_LOCK = threading.Lock()


def name_of(url: str) -> str:
    """The broker a ``memory://name`` URL names (``memory://`` alone: the unnamed one)."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != SCHEME:
        raise ConfigurationError(f"not a memory:// URL: {url!r}")
    name = rest.strip("/")
    if "/" in name or "?" in name:
        raise ConfigurationError(f"a memory:// URL names one broker, as memory://name: {url!r}")
    return name


def named(url: str) -> InProcessBroker:
    """The process's broker for ``url``, made on first use; every caller naming it shares it."""
    name = name_of(url)
    with _BROKERS_LOCK:
        broker = _BROKERS.get(name)
        if broker is None:
            broker = _BROKERS[name] = InProcessBroker(name)
        return broker
