"""A FastStream worker in a process of its own, for the crash test: a RabbitMQ subscriber
behind IdempotentMiddleware over a shared SQLite store; each run records that it began, waits
``RUN`` seconds, and records its effect, as rows of a shared SQLite table.
``python -m tests.messaging.faststream.worker QUEUE STORE EFFECTS RUN LEASE``; it consumes
until killed."""

from __future__ import annotations

import asyncio
import sys

from faststream.rabbit import RabbitBroker, RabbitQueue, RabbitRouter

from mideng import Guard, open_store
from mideng.messaging.faststream import IdempotentMiddleware
from tests.brokers import AMQP_URL
from tests.helpers.effects import record


async def main(queue: str, store: str, effects: str, run: str, lease: str) -> None:
    guard = Guard(open_store(store), lease=float(lease))
    middleware = IdempotentMiddleware(guard, "crash", in_flight_delay=0.2)
    router = RabbitRouter(middlewares=[middleware])

    @router.subscriber(RabbitQueue(queue, durable=True))
    async def reserve(body: dict[str, str]) -> None:
        record(effects, "began", body["order"])
        await asyncio.sleep(float(run))  # the window a kill -9 lands in
        record(effects, "effects", body["order"])

    broker = RabbitBroker(AMQP_URL)
    broker.include_router(router)
    async with broker:
        await broker.start()
        await asyncio.Event().wait()  # until killed


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
