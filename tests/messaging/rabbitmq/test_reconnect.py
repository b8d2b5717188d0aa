"""The RabbitMQ adapter rides out a closed connection: the broker closes the consumer's own
connection for real (``rabbitmqctl close_connection``, found by its connection name; no other
connection is touched) while it waits for deliveries and after handlers ran, before their
acks. Each message's effect happens once, nothing is left in the queue, and the reconnect is
logged."""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
from collections import Counter
from typing import Any

import pytest

from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message, rabbitmq
from mideng.messaging.reconnect import Backoff
from mideng.stores.memory import MemoryStore
from tests.brokers import AMQP_URL, BrokerNames, token
from tests.messaging.rabbitmq.test_adapter import publish, ready
from tests.messaging.running import consume_until

KEY = "idempotency-key"

pytestmark = pytest.mark.skipif(
    shutil.which("rabbitmqctl") is None, reason="closing a connection needs rabbitmqctl"
)


def close_named(name: str) -> int:
    """Have the broker close every connection named ``name``; how many it closed."""
    listed = subprocess.run(
        ["rabbitmqctl", "list_connections", "pid", "client_properties", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    pids = [
        line.split("\t")[0] for line in listed.splitlines() if f'"connection_name","{name}"' in line
    ]
    for pid in pids:
        subprocess.run(
            ["rabbitmqctl", "close_connection", pid, "closed by the reconnect test", "-q"],
            capture_output=True,
            timeout=60,
            check=True,
        )
    return len(pids)


def outcomes(caplog: pytest.LogCaptureFixture, outcome: str) -> int:
    return sum(1 for r in caplog.records if getattr(r, "mideng_outcome", None) == outcome)


def run(consumer: IdempotentConsumer, queue: str, name: str, stop: asyncio.Event) -> Any:
    return rabbitmq.consume(
        consumer,
        AMQP_URL,
        queue=queue,
        stop=stop,
        reconnect=Backoff(0.01, 0.05),
        client_properties={"connection_name": name},
    )


KEYS = [f"order:{n}" for n in range(8)] + ["order:0", "order:1"]  # two published twice


def test_a_connection_closed_while_waiting_for_deliveries_is_reconnected(
    broker_names: BrokerNames, caplog: pytest.LogCaptureFixture
) -> None:
    queue, name = broker_names.rabbitmq_queue(), f"mideng-test-{token()[:10]}"
    runs: Counter[str] = Counter()
    consumer = IdempotentConsumer(
        Guard(MemoryStore()), "stock", lambda m: runs.update([m.headers[KEY]])
    )
    closed = 0

    async def scenario() -> None:
        await publish(queue)  # declared, empty

        async def closed_then_published() -> bool:
            nonlocal closed
            if not closed:
                closed = await asyncio.to_thread(close_named, name)
                if closed:
                    await publish(queue, *KEYS)
                return False
            return len(runs) == 8 and await ready(queue) == 0

        await consume_until(
            lambda stop: run(consumer, queue, name, stop), closed_then_published, 60
        )

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    assert closed == 1
    assert runs == Counter(f"order:{n}" for n in range(8))
    assert outcomes(caplog, "connection_lost") >= 1
    assert outcomes(caplog, "reconnected") >= 1


def test_a_connection_closed_after_the_handlers_and_before_the_acks_reruns_nothing(
    broker_names: BrokerNames, caplog: pytest.LogCaptureFixture
) -> None:
    queue, name = broker_names.rabbitmq_queue(), f"mideng-test-{token()[:10]}"
    runs: Counter[str] = Counter()
    closed: list[int] = []

    def handler(message: Message) -> None:
        runs.update([message.headers[KEY]])
        if sum(closed) < 2:  # the ack this handler's message needs goes nowhere, twice
            closed.append(close_named(name))

    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", handler)

    async def scenario() -> None:
        await publish(queue, *KEYS)

        async def done() -> bool:
            return len(runs) == 8 and await ready(queue) == 0

        await consume_until(lambda stop: run(consumer, queue, name, stop), done, 60)
        assert await ready(queue) == 0  # nothing went back unacked on the final close

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    assert sum(closed) == 2
    assert runs == Counter(f"order:{n}" for n in range(8))  # redelivered, not run again
    assert outcomes(caplog, "connection_lost") >= 2
    assert outcomes(caplog, "reconnected") >= 2
    assert outcomes(caplog, "replay") >= 2 + 2
