"""The JetStream adapter rides out a dropped connection: the consumer's connection, through
a proxy, is reset for real after a handler ran and before its ack. With nats-py's own
reconnects it goes on by itself; with them off (as once nats-py gives up) the adapter connects
a new client after its backoff. Either way every key runs once and nothing is left unacked."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from urllib.parse import urlparse

import pytest

from mideng import Guard
from mideng.messaging import IdempotentConsumer, Message
from mideng.messaging import nats as adapter
from mideng.messaging.reconnect import Backoff
from mideng.stores.memory import MemoryStore
from tests.helpers.cut_proxy import CutProxy
from tests.messaging.nats.conftest import NatsSide

pytestmark = pytest.mark.slow

KEYS = [f"order:{n}" for n in range(8)] + ["order:0", "order:1"]  # two published twice


def outcomes(caplog: pytest.LogCaptureFixture, outcome: str) -> int:
    return sum(1 for r in caplog.records if getattr(r, "mideng_outcome", None) == outcome)


@pytest.mark.parametrize("client_reconnects", [True, False])
def test_a_connection_reset_before_the_ack_loses_and_reruns_nothing(
    nats_side: NatsSide, caplog: pytest.LogCaptureFixture, client_reconnects: bool
) -> None:
    runs: Counter[str] = Counter()
    nats_side.publish([(key, b"{}") for key in KEYS])

    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        async with CutProxy(urlparse(nats_side.url).port or 4222) as proxy:

            def handler(message: Message) -> None:
                runs.update([message.headers["idempotency-key"]])
                if proxy.cuts < 2:  # this message's ack meets a reset connection, twice
                    loop.call_soon_threadsafe(proxy.cut)

            consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", handler)
            stop = asyncio.Event()
            options = {**nats_side.adapter(), "batch": 3}
            task = asyncio.create_task(
                adapter.consume(
                    consumer,
                    f"nats://127.0.0.1:{proxy.port}",
                    stop=stop,
                    reconnect=Backoff(0.01, 0.05),
                    allow_reconnect=client_reconnects,
                    reconnect_time_wait=0.1,
                    **options,
                )
            )
            deadline = loop.time() + 40
            while not (len(runs) == 8 and await _settled(nats_side)):
                assert not task.done(), task
                assert loop.time() < deadline, f"timed out: {runs}, {nats_side.state()}"
                await asyncio.sleep(0.1)
            stop.set()
            await asyncio.wait_for(task, 15)
            return proxy.cuts

    with caplog.at_level(logging.WARNING):
        cuts = asyncio.run(scenario())
    assert cuts == 2
    assert runs == Counter(f"order:{n}" for n in range(8))  # redelivered, not run again
    if not client_reconnects:
        assert outcomes(caplog, "connection_lost") >= 2
        assert outcomes(caplog, "reconnected") >= 2


async def _settled(side: NatsSide) -> bool:
    info = await side._info()
    return info is not None and info.num_pending == 0 and info.num_ack_pending == 0
