"""The NATS publisher outlives its client: once nats-py gives up reconnecting (after
``max_reconnect_attempts``, or at once with reconnects off) its client is closed for good, and
a publisher that kept it would fail every publish from then on, each row going dead after
``max_attempts``. The next publish connects a new client instead."""

from __future__ import annotations

import asyncio
from urllib.parse import urlparse

import pytest

from mideng.messaging.publish import open_publisher, outgoing
from tests.brokers import NATS_URL, BrokerNames
from tests.helpers.cut_proxy import CutProxy

pytestmark = pytest.mark.slow


def test_a_publish_after_the_client_gave_up_connects_again(broker_names: BrokerNames) -> None:
    import nats

    names = broker_names.nats("relay")

    async def main() -> int:
        client = await nats.connect(NATS_URL)
        try:
            jetstream = client.jetstream()
            await jetstream.add_stream(name=names.stream, subjects=[names.subject])
            async with CutProxy(urlparse(NATS_URL).port or 4222) as proxy:
                # Reconnects off: the client closes at the first drop, as one does once its
                # reconnect attempts are spent.
                publisher = open_publisher(
                    f"nats://127.0.0.1:{proxy.port}", timeout=2.0, allow_reconnect=False
                )
                await publisher.start()
                try:
                    await publisher.publish(outgoing(names.subject, b"1", key="order:1"))
                    proxy.cut()
                    # The first publishes after the drop may fail (the relay retries them);
                    # one must go through once the broker is reachable again.
                    loop = asyncio.get_running_loop()
                    deadline = loop.time() + 20
                    while True:
                        try:
                            await publisher.publish(outgoing(names.subject, b"2", key="order:2"))
                            break
                        except Exception:
                            if loop.time() > deadline:
                                raise
                            await asyncio.sleep(0.2)
                finally:
                    await publisher.close()
            info = await jetstream.stream_info(names.stream)
            return int(info.state.messages)
        finally:
            await client.close()

    assert asyncio.run(main()) == 2
