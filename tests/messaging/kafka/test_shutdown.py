"""A stop is bounded even when the broker does not answer: a join whose SyncGroup is held
(what Tansu does when the group's leader leaves mid-join), a LeaveGroup, a commit in hand.
Each goes through a proxy that stops forwarding (tests/messaging/kafka/proxy.py) in front of
a Tansu broker of its own; aiokafka's request timeout (40 s) is far past the bound here, so
without the bound each of these stops would take that long or longer. What the stop abandons
is never committed, and the next member reads it again."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.brokers import BrokerNames, KafkaBroker, start_tansu, stop_broker
from tests.messaging.base.broker import until
from tests.messaging.kafka.broker import Kafka
from tests.messaging.kafka.proxy import LEAVE_GROUP, OFFSET_COMMIT, SYNC_GROUP, Proxy
from tests.messaging.kafka.test_consume import Counting

pytestmark = pytest.mark.slow

#: The close_timeout given; SLACK is for a loaded machine, far below aiokafka's 40 s.
BOUND, SLACK = 2.0, 6.0


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaBroker, Proxy]]:
    proxy = Proxy()
    log: Path = tmp_path_factory.mktemp("tansu-proxied") / "broker.log"
    broker = start_tansu(log, advertised_port=proxy.port)
    proxy.start(broker.port)
    try:
        yield KafkaBroker(broker.host, proxy.port, broker.process, log), proxy
    finally:
        proxy.close()
        stop_broker(broker.process)


@pytest.fixture
def hung(
    broker_names: BrokerNames, proxied: tuple[KafkaBroker, Proxy]
) -> Iterator[tuple[Kafka, Proxy]]:
    broker, proxy = proxied
    proxy.withhold()
    proxy.held.clear()
    try:
        yield Kafka(broker_names.kafka(broker)), proxy
    finally:
        proxy.withhold()  # the names' clean-up goes through the proxy too


def client_tasks() -> list[asyncio.Task[Any]]:
    """The pending tasks that run aiokafka's code (its coordinator, fetcher, connections)."""
    return [
        task
        for task in asyncio.all_tasks()
        if "aiokafka" in getattr(getattr(task.get_coro(), "cr_code", None), "co_filename", "")
    ]


async def stopped_within(task: asyncio.Task[None], seconds: float) -> float:
    began = asyncio.get_running_loop().time()
    await asyncio.wait_for(task, seconds)
    took = asyncio.get_running_loop().time() - began
    # Connections closed on the way out finish their cancelled reads on the next turns.
    await until(lambda: not client_tasks(), 2.0)
    return took


def abandoned(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if getattr(r, "mideng_outcome", None) == "leave_abandoned"
    ]


def test_stop_cuts_short_a_join_whose_sync_group_is_held(
    hung: tuple[Kafka, Proxy], caplog: pytest.LogCaptureFixture
) -> None:
    side, proxy = hung
    side.publish([(f"order:{n}", b"{}") for n in range(5)])
    proxy.withhold(SYNC_GROUP)
    handled: Counter[str] = Counter()

    async def scenario() -> float:
        stop = asyncio.Event()
        member = Counting(handled, 0.0)
        task = asyncio.create_task(side.consume(member, stop, close_timeout=BOUND))
        await until(lambda: SYNC_GROUP in proxy.held, 30)  # joined, now waiting on the sync
        stop.set()
        return await stopped_within(task, BOUND + SLACK)

    caplog.set_level(logging.WARNING, "mideng")
    took = asyncio.run(scenario())
    assert took < BOUND + SLACK
    assert len(abandoned(caplog)) == 1  # it tried to leave, and gave up after the bound
    assert not handled  # never assigned anything
    assert sum(side.lag().values()) == 5


def test_stop_gives_up_on_a_leave_group_the_broker_does_not_answer(
    hung: tuple[Kafka, Proxy], caplog: pytest.LogCaptureFixture
) -> None:
    side, proxy = hung
    side.publish([(f"order:{n}", b"{}") for n in range(5)])
    first: Counter[str] = Counter()
    second: Counter[str] = Counter()

    async def consumed(member: Counting, count: int, stop: asyncio.Event) -> asyncio.Task[None]:
        task = asyncio.create_task(side.consume(member, stop, close_timeout=BOUND))
        await until(lambda: len(member.handled) == count, 30)
        await asyncio.to_thread(side.until_settled)
        return task

    async def scenario() -> float:
        # Tansu numbers a group's first generation 0, and aiokafka sends no LeaveGroup from
        # generation 0: a first member makes the one the second joins 1 or more.
        stop = asyncio.Event()
        task = await consumed(Counting(first, 0.0), 5, stop)
        stop.set()
        await asyncio.wait_for(task, 20)
        await asyncio.to_thread(side.publish, [(f"order:{n}", b"{}") for n in range(5, 10)])
        stop = asyncio.Event()
        task = await consumed(Counting(second, 0.0), 5, stop)
        proxy.withhold(LEAVE_GROUP)
        stop.set()
        return await stopped_within(task, BOUND + SLACK)

    caplog.set_level(logging.WARNING, "mideng")
    took = asyncio.run(scenario())
    assert took < BOUND + SLACK
    assert LEAVE_GROUP in proxy.held
    assert len(abandoned(caplog)) == 1
    assert side.lag() == dict.fromkeys(side.ends, 0)  # everything was committed before


class StopsTheBrokerMidBatch(Counting):
    """On its first batch: the broker stops answering commits, and the member is stopped."""

    def __init__(self, handled: Counter[str], proxy: Proxy, stop: asyncio.Event) -> None:
        super().__init__(handled, 0.0)
        self.proxy, self.stop = proxy, stop

    async def handle_batch(self, messages: Any) -> Any:
        if not self.busy.is_set():
            self.proxy.withhold(OFFSET_COMMIT)
            self.stop.set()
        return await super().handle_batch(messages)


def test_stop_abandons_a_commit_the_broker_does_not_answer_and_it_is_read_again(
    hung: tuple[Kafka, Proxy],
) -> None:
    side, proxy = hung
    side.publish([(f"order:{n}", b"{}") for n in range(10)])
    first: Counter[str] = Counter()
    second: Counter[str] = Counter()

    async def scenario() -> float:
        stop = asyncio.Event()
        member = StopsTheBrokerMidBatch(first, proxy, stop)
        task = asyncio.create_task(side.consume(member, stop, close_timeout=BOUND))
        # Once for the commit in hand, once for the leave on the same silent connection.
        return await stopped_within(task, 2 * BOUND + SLACK)

    took = asyncio.run(scenario())
    assert took < 2 * BOUND + SLACK
    assert OFFSET_COMMIT in proxy.held
    assert first
    assert sum(first.values()) < 10  # one partition's batch; the rest were not started
    proxy.withhold()
    assert sum(side.lag().values()) == 10  # the abandoned commit never happened

    async def again() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(side.consume(Counting(second, 0.0), stop))
        await until(lambda: len(second) == 10, 30)
        await asyncio.to_thread(side.until_settled)
        stop.set()
        await asyncio.wait_for(task, 20)

    asyncio.run(again())
    assert set(first) <= set(second)  # what the stop abandoned was read again
    assert side.lag() == dict.fromkeys(side.ends, 0)
