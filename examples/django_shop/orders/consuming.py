"""What the two consumer commands share: one member of a consumer group on a Redis stream,
run until SIGTERM or Ctrl-C (the batch in hand is finished and acked first)."""

from __future__ import annotations

import asyncio
import signal
import socket
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from mideng.messaging import redis_streams


class StreamCommand(BaseCommand):
    """``handle`` consumes ``stream`` as ``group``/``--name`` with what ``consumer()`` makes."""

    stream: str
    group: str

    def consumer(self) -> Any:
        raise NotImplementedError

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--name",
            default=socket.gethostname(),
            help="this member of the consumer group; a restart under the same name first "
            "settles the entries it held (default: the host's name)",
        )
        parser.add_argument("--batch", type=int, default=100, help="entries read at once")

    def handle(self, *args: Any, **options: Any) -> None:
        stream, group = getattr(settings, self.stream), getattr(settings, self.group)
        consumer = self.consumer()
        self.stdout.write(f"consuming {stream} as {group}/{options['name']}")
        asyncio.run(self._consume(consumer, stream, group, options["name"], options["batch"]))
        self.stdout.write("stopped")

    async def _consume(self, consumer: Any, stream: str, group: str, name: str, batch: int) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await redis_streams.consume(
            consumer,
            settings.REDIS_URL,
            stream=stream,
            group=group,
            name=name,
            batch=batch,
            stop=stop,
        )
