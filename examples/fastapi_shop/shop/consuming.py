"""Run one consumer on its RabbitMQ queue until SIGTERM or Ctrl-C (then it settles what it
holds and exits 0)."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

from mideng.messaging import rabbitmq
from shop import settings


def serve(consumer: Any, queue: str) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await rabbitmq.consume(consumer, settings.AMQP_URL, queue=queue, stop=stop)

    asyncio.run(run())
