"""A relay process for the SIGTERM test: two batches in flight, each publishing slowly to a
file (a publish is confirmed once its line is written), and each batch's start and end noted
in a second file, with ``term`` when SIGTERM arrives.

argv: db_url table publish_log marks_log delay
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from typing import Any

from mideng.messaging.publish import Outgoing
from mideng.outbox import Batch, Relay


class FilePublisher:
    def __init__(self, path: str, delay: float) -> None:
        self.log = open(path, "a", buffering=1)  # noqa: SIM115  (kept open until closed)
        self.delay = delay

    async def start(self) -> None:
        return None

    async def publish(self, message: Outgoing) -> None:
        await asyncio.sleep(self.delay)
        self.log.write(message.message_id + "\n")

    async def close(self) -> None:
        self.log.close()


class MarkedRelay(Relay):
    def __init__(self, marks: Any, *args: Any, **options: Any) -> None:
        super().__init__(*args, **options)
        self.marks = marks
        self.batches = 0

    async def _finish(self, claimed: Any, gate: asyncio.Semaphore) -> Batch:
        self.batches += 1
        number = self.batches
        self.marks.write(f"start {number}\n")
        batch = await super()._finish(claimed, gate)
        self.marks.write(f"end {number}\n")  # after its write-back committed
        return batch


async def main(marks: Any) -> int:
    db_url, table, log_path, _, delay = sys.argv[1:6]
    relay = MarkedRelay(
        marks,
        db_url,
        FilePublisher(log_path, float(delay)),
        table=table,
        batch_keys=5,
        depth=2,
        lease=60.0,
        listen=False,
    )
    stop = asyncio.Event()

    def term() -> None:
        marks.write("term\n")
        stop.set()

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, term)
    async with relay:
        marks.write("ready\n")
        await relay.run(stop)
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt), open(sys.argv[4], "a", buffering=1) as marks:
        sys.exit(asyncio.run(main(marks)))
