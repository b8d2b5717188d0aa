"""A relay process for the crash tests: publishes to a real broker, a little slowly, and
writes each message id to a file before it publishes it, so the parent can SIGKILL it in the
middle of a batch and know everything it may have published (a broker can deliver a message
whose confirm the killed relay never read).

argv: db_url broker_url table publish_log lease delay (``spawn`` starts one)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

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
    logging.basicConfig(level=logging.WARNING)  # a failed publish is logged once written back
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


def spawn(
    db_url: str,
    broker_url: str,
    table: str,
    log: Path,
    lease: float,
    delay: float,
    stderr: IO[bytes] | None = None,
) -> subprocess.Popen[bytes]:
    """A relay process, once it has started (its publisher connected)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    ready = Path(str(log) + ".ready")
    ready.unlink(missing_ok=True)
    argv = [db_url, broker_url, table, str(log), str(lease), str(delay)]
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.outbox.relay_proc", *argv],
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        stderr=stderr,
    )
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert process.poll() is None, "the relay process died at start"
        assert time.monotonic() < deadline, "the relay process never started"
        time.sleep(0.02)
    return process


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(asyncio.run(main()))
