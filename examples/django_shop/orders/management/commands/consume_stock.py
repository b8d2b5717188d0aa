"""``python manage.py consume_stock``: the stock service, reading ``order.paid`` events from
Redis Streams until SIGTERM or Ctrl-C (the batch in hand is finished and acked first)."""

from __future__ import annotations

import asyncio
import signal
import socket
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from mideng.messaging import IdempotentConsumer, redis_streams
from orders.stock import stock_consumer


class Command(BaseCommand):
    help = "Take stock for paid orders, once per order, from the order events stream."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--name",
            default=socket.gethostname(),
            help="this member of the consumer group; a restart under the same name first "
            "settles the entries it held (default: the host's name)",
        )
        parser.add_argument("--batch", type=int, default=100, help="entries read at once")

    def handle(self, *args: Any, **options: Any) -> None:
        consumer = stock_consumer()
        self.stdout.write(
            f"consuming {settings.ORDER_EVENTS} as {settings.STOCK_GROUP}/{options['name']}"
        )
        asyncio.run(self._consume(consumer, options["name"], options["batch"]))
        self.stdout.write("stopped")

    async def _consume(self, consumer: IdempotentConsumer, name: str, batch: int) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await redis_streams.consume(
            consumer,
            settings.REDIS_URL,
            stream=settings.ORDER_EVENTS,
            group=settings.STOCK_GROUP,
            name=name,
            batch=batch,
            stop=stop,
        )
