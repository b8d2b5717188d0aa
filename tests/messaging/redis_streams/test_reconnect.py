"""The Redis Streams adapter rides out a dropped connection, beyond the base suite's drops
(while it blocks in XREADGROUP, after handlers ran and before the XACK): its own connection
is killed for real (CLIENT KILL by its client name, no other client touched) while a batch
is decided beside the next and in the middle of a dead letter; every message's effect happens
once and nothing is left pending. A server that stays down is retried with a bounded backoff,
and ``stop`` still ends the call while it waits; acks lost at stop leave their entries
pending for the next run, which acks them unrun.

These consumers are given ``retry=Retry(NoBackoff(), 0)`` (tests/messaging/redis_streams/
broker.py says why).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message, redis_streams
from mideng.messaging.reconnect import Backoff
from mideng.stores.memory import MemoryStore
from tests.brokers import BrokerNames, token
from tests.messaging.base.broker import outcomes
from tests.messaging.redis_streams.broker import half_open, kill_named
from tests.messaging.redis_streams.held import HeldStore
from tests.messaging.running import consume_until
from tests.services import REDIS_URL

KEY = "idempotency-key"


@pytest.fixture(autouse=True)
def killed_connections_stay_half_open() -> Iterator[None]:
    with half_open():
        yield


class Run:
    """A consumer on a fresh stream whose connection is called ``client_name``."""

    def __init__(
        self, names: BrokerNames, handler: Any, store: Any = None, **consumer: Any
    ) -> None:
        self.names = names.redis_stream("reconnect")
        self.client_name = f"mideng-test-{token()[:10]}"
        self.store = store if store is not None else MemoryStore()
        self.consumer = IdempotentConsumer(Guard(self.store), "stock", handler, **consumer)

    def consume(self, stop: asyncio.Event, **options: Any) -> Any:
        return redis_streams.consume(
            self.consumer,
            REDIS_URL,
            stream=self.names.stream,
            group=self.names.group,
            name="w1",
            stop=stop,
            reconnect=Backoff(0.01, 0.05),
            client_name=self.client_name,
            retry=Retry(NoBackoff(), 0),
            **options,
        )

    async def publish(self, keys: Sequence[str | None]) -> None:
        client: Any = aredis.from_url(REDIS_URL)
        for key in keys:
            await client.xadd(self.names.stream, {"body": b"x", **({KEY: key} if key else {})})
        await client.aclose()

    async def drained(self) -> bool:
        client: Any = aredis.from_url(REDIS_URL)
        try:
            groups = await client.xinfo_groups(self.names.stream)
            pending = int((await client.xpending(self.names.stream, self.names.group))["pending"])
        except redis.ResponseError:  # the group is not there yet
            return False
        finally:
            await client.aclose()
        return bool(groups) and groups[0]["lag"] == 0 and pending == 0

    async def dead(self) -> list[Any]:
        client: Any = aredis.from_url(REDIS_URL)
        found: list[Any] = await client.xrange(self.names.dead)
        await client.aclose()
        return found


def test_a_connection_killed_while_a_batch_is_decided_loses_and_reruns_nothing(
    broker_names: BrokerNames, caplog: pytest.LogCaptureFixture
) -> None:
    # a and b are one batch, its completion held back; c and d, the next, are read and run
    # meanwhile, and c cuts the connection, so the read after them fails while c and d are
    # still in hand. Both batches still finish; their entries stay pending and the reread
    # acks them unrun, except d, whose first run failed: it waits out its retry delay.
    ran: dict[str, list[float]] = {}
    kills: list[int] = []
    store = HeldStore()

    async def handler(message: Message) -> None:
        key = message.headers[KEY]
        ran.setdefault(key, []).append(time.monotonic())
        if key == "d" and len(ran[key]) == 1:
            raise RuntimeError("the first try fails")
        if key == "c" and not kills:
            kills.append(await asyncio.to_thread(kill_named, run.client_name))
            store.go.set()

    run = Run(broker_names, handler, store=store, retry_delay=1.0)

    async def scenario() -> None:
        await run.publish(["a", "b", "c", "d", "e"])

        async def done() -> bool:
            return len(ran.get("d", [])) == 2 and len(ran) == 5 and await run.drained()

        await consume_until(lambda stop: run.consume(stop, batch=2, block=0.2), done)

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    assert not store.starved
    assert kills == [1]
    assert outcomes(caplog, "connection_lost") >= 1
    assert {key: len(times) for key, times in ran.items()} == {
        "a": 1,
        "b": 1,
        "c": 1,
        "d": 2,
        "e": 1,
    }
    assert ran["d"][1] - ran["d"][0] >= 1.0
    # d's retry kept its schedule through the loss: the reread left it alone rather than
    # claiming it again early and finding it held.
    assert outcomes(caplog, "in_progress") == 0
    assert outcomes(caplog, "replay") >= 3  # a, b and c read again and acked unrun


def test_a_connection_killed_in_the_middle_of_a_dead_letter_copies_it_once(
    broker_names: BrokerNames, caplog: pytest.LogCaptureFixture
) -> None:
    runs: Counter[str] = Counter()
    kills: list[int] = []

    def before_the_copy(message: Message, reason: str) -> None:
        # Called after the verdict and before the adapter's MULTI (XADD to the dead stream,
        # XACK): the MULTI meets a closed connection.
        if not kills:
            kills.append(kill_named(run.client_name))

    run = Run(broker_names, lambda m: runs.update([m.headers[KEY]]), on_dead_letter=before_the_copy)

    async def scenario() -> list[Any]:
        await run.publish(["order:1", None, "order:2"])

        async def done() -> bool:
            return len(runs) == 2 and await run.drained()

        await consume_until(lambda stop: run.consume(stop, batch=1, block=0.2), done)
        return await run.dead()

    with caplog.at_level(logging.WARNING):
        dead = asyncio.run(scenario())
    assert kills == [1]
    assert len(dead) == 1  # copied once: the MULTI either ran whole or not at all
    assert b"no business key" in dead[0][1][b"dead-reason"]
    assert runs == Counter(["order:1", "order:2"])
    assert outcomes(caplog, "connection_lost") == 1
    assert outcomes(caplog, "reconnected") == 1


def test_acks_lost_at_stop_leave_the_entries_pending_for_the_next_run(
    broker_names: BrokerNames, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch's XACK rides on the next read; at stop it is sent on its own, and here it
    meets a killed connection: the call logs ``left_pending`` and returns, the batch stays
    pending, and the next run under the same name acks it without running it again."""
    runs: Counter[str] = Counter()
    stop = asyncio.Event()

    def handler(message: Message) -> None:
        runs.update([message.headers[KEY]])
        if len(runs) == 10:  # the batch's last: stop, and cut the connection the XACK needs
            stop.set()
            kill_named(run.client_name)

    run = Run(broker_names, handler)

    async def pending() -> int:
        client: Any = aredis.from_url(REDIS_URL)
        try:
            return int((await client.xpending(run.names.stream, run.names.group))["pending"])
        finally:
            await client.aclose()

    async def scenario() -> tuple[int, int]:
        await run.publish([f"order:{n}" for n in range(10)])
        await asyncio.wait_for(run.consume(stop, batch=10, block=0.2), 15)
        left = await pending()
        await consume_until(lambda s: run.consume(s, batch=10, block=0.2), run.drained)
        return left, await pending()

    with caplog.at_level(logging.WARNING):
        left, after = asyncio.run(scenario())
    assert left == 10
    assert outcomes(caplog, "left_pending") == 1
    assert after == 0
    assert runs == Counter(f"order:{n}" for n in range(10))  # each once, the rerun included
    assert outcomes(caplog, "replay") >= 10


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_server_that_stays_down_is_retried_with_a_bounded_backoff(
    broker_names: BrokerNames, caplog: pytest.LogCaptureFixture
) -> None:
    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", lambda m: None)
    waits: list[float] = []  # a fake clock: each wait advances it, nothing sleeps

    async def fake_wait(seconds: float, stop: asyncio.Event) -> None:
        waits.append(seconds)
        if len(waits) == 12:
            stop.set()
        await asyncio.sleep(0)

    async def scenario() -> None:
        await redis_streams.consume(
            consumer,
            f"redis://127.0.0.1:{closed_port()}",
            stream="s",
            group="g",
            name="w1",
            stop=asyncio.Event(),
            reconnect=Backoff(0.1, 5.0, wait=fake_wait),
            retry=Retry(NoBackoff(), 0),
        )

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    assert waits == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 3.2] + [5.0] * 6)
    # One connection attempt before each wait, at 0, 0.1, 0.3, 0.7, 1.5, 3.1, 6.3 s of the
    # fake clock and then every 5 s: 11 in its first 30 s, not a busy loop.
    clock = [sum(waits[:n]) for n in range(len(waits))]
    assert sum(1 for t in clock if t < 30) == 11
    assert outcomes(caplog, "connection_lost") == 12
    assert outcomes(caplog, "reconnected") == 0


def test_stop_ends_a_consumer_that_is_backing_off(
    broker_names: BrokerNames, caplog: pytest.LogCaptureFixture
) -> None:
    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", lambda m: None)

    async def scenario() -> None:
        async def backing_off() -> bool:
            return outcomes(caplog, "connection_lost") >= 1

        # The first wait is 300 s: consume_until gives the stopped call 15 s, so it returns
        # only if stop cut the wait short.
        await consume_until(
            lambda stop: redis_streams.consume(
                consumer,
                f"redis://127.0.0.1:{closed_port()}",
                stream="s",
                group="g",
                name="w1",
                stop=stop,
                reconnect=Backoff(300.0, 300.0),
                retry=Retry(NoBackoff(), 0),
            ),
            backing_off,
        )

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    assert outcomes(caplog, "connection_lost") == 1
