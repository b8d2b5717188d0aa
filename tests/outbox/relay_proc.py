"""A relay process for the crash tests: publishes to a real broker, a little slowly, and
writes each message id to a file before it publishes it, so the parent can SIGKILL it in the
middle of a batch and know everything it may have published (a broker can deliver a message
whose confirm the killed relay never read).

argv: db_url broker_url table publish_log lease delay
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

from mideng.messaging.publish import Outgoing, open_publisher
from mideng.outbox import Relay


class Logged:
    def __init__(self, url: str, log_path: str, delay: float) -> None:
        self.inner = open_publisher(url)
        self.log = open(log_path, "a", buffering=1)  # noqa: SIM115  (kept open until closed)
        self.delay = delay

    async def start(self) -> None:
        await self.inner.start()

    async def publish(self, message: Outgoing) -> None:
        await asyncio.sleep(self.delay)
        self.log.write(message.message_id + "\n")
        await self.inner.publish(message)

    async def close(self) -> None:
        await self.inner.close()
        self.log.close()


async def main() -> int:
    db_url, broker_url, table, log_path, lease, delay = sys.argv[1:7]
    relay = Relay(
        db_url,
        Logged(broker_url, log_path, float(delay)),
        table=table,
        lease=float(lease),
        batch_keys=8,
        poll=0.05,
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with relay:
        await asyncio.to_thread(Path(log_path + ".ready").write_text, str(os.getpid()))
        await relay.run(stop)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(asyncio.run(main()))
