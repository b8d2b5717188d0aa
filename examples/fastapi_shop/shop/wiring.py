"""The service's engine, Guard and outbox, made once per process, and ``set_up``: the tables,
the outbox and the broker's exchange and queues (``python -m shop setup``)."""

from __future__ import annotations

import aio_pika
from sqlalchemy import create_engine

from mideng import Guard, open_store
from mideng.outbox import Outbox
from shop import settings
from shop.tables import metadata

engine = create_engine(settings.DATABASE_URL, pool_pre_ping=True)
#: Every dedup record (HTTP keys, consumers, the notification operation, the nightly job's
#: slots) is a row of one table in the shop's own database.
guard = Guard(open_store(settings.DATABASE_URL, table="mideng_records"), lease=settings.LEASE)
outbox = Outbox(engine)  # the table mideng_outbox

#: The HTTP layer's stored responses, a day.
guard.configure_scope("http", ttl=24 * 3600)
#: The notification operation keeps its failures, so its record counts a message's attempts.
guard.configure_scope("notify", on_error="retry", max_attempts=5)


def create_tables() -> None:
    metadata.create_all(engine)
    outbox.create_schema()


async def declare_broker() -> None:
    """The exchange the relay publishes to, and one queue per service bound to order.paid."""
    async with await aio_pika.connect(settings.AMQP_URL) as connection:
        channel = await connection.channel()
        events = await channel.declare_exchange(
            settings.EXCHANGE, aio_pika.ExchangeType.TOPIC, durable=True
        )
        for name in (settings.STOCK_QUEUE, settings.NOTIFY_QUEUE):
            queue = await channel.declare_queue(name, durable=True)
            await queue.bind(events, routing_key="order.paid")
