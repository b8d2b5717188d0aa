"""The notifier's worker that dies: a process of its own, SIGKILLed between the SMS and the
coupon.

``killed_between_sms_and_coupon`` starts ``python -m mideng.demo.worker`` on the shop's
database (and, for mideng's shop, on the store), which handles one delivery: without mideng
it runs the notification for the event; on mideng it hands the message to the notifier's
OperationConsumer, as the consumer that received it would. As its call reaches the coupon
service it says so on stdout and waits, and the parent kills it with SIGKILL there. What it
did (the SMS, and on mideng the SMS step's record) is in the database; the rest never
happened; on mideng its operation's record stays claimed until its lease lapses, and the
delivery after that takes it over.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

from mideng import Guard, open_store
from mideng.demo.shop import Gateways, Notification, Tables, notify_plainly
from mideng.messaging import Message
from mideng.outbox.engines import sync_engine

#: What the worker prints as its call reaches the coupon service.
AT_COUPON = "at-coupon"
#: How long a worker whose parent never killed it waits before it exits by itself.
ORPHAN_WAIT = 60.0


class WorkerFailed(Exception):
    """The worker did not reach the coupon service, or did not die of the SIGKILL."""


class WorkerKilled(Exception):
    """The notifier's worker was SIGKILLed mid-notification: what it did is done, the rest
    is not."""


def killed_between_sms_and_coupon(spec: dict[str, Any]) -> int:
    """Run the notification ``spec`` describes in a worker process and SIGKILL it as it
    reaches the coupon service; its pid. ``spec``: ``mode`` (``guarded`` or ``plain``),
    ``shop`` (the shop's database URL), ``prefix`` (its tables'); for ``plain`` the ``event``;
    for ``guarded`` the ``message`` (``body``, ``id``, ``headers``), the ``store`` URL and
    ``store_options``."""
    child = subprocess.Popen(
        [sys.executable, "-m", "mideng.demo.worker", json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    said = child.stdout.readline().strip()
    if said != AT_COUPON:
        _, errors = child.communicate(timeout=30)
        last = (errors.strip().splitlines() or ["no output"])[-1]
        raise WorkerFailed(f"the notifier's worker ended before the coupon: {last}")
    os.kill(child.pid, signal.SIGKILL)
    child.communicate(timeout=30)
    if child.returncode != -signal.SIGKILL:
        raise WorkerFailed(f"the notifier's worker ended with {child.returncode}, not SIGKILL")
    return child.pid


def _at_coupon() -> None:
    print(AT_COUPON, flush=True)
    time.sleep(ORPHAN_WAIT)
    raise SystemExit("nobody killed this worker")


def main(spec: dict[str, Any]) -> None:
    engine = sync_engine(spec["shop"])
    gateways = Gateways(engine, Tables(spec["prefix"]), before_coupon=_at_coupon)
    if spec["mode"] == "plain":
        notify_plainly(gateways, spec["event"])
        return
    store = open_store(spec["store"], **spec["store_options"])
    delivered = spec["message"]
    message = Message(delivered["body"].encode(), delivered["headers"], delivered["id"])
    asyncio.run(Notification(Guard(store), gateways).consumer.handle(message))


def message_spec(message: Message) -> dict[str, Any]:
    """What of ``message`` the worker is handed (its body is the event's JSON)."""
    return {"body": message.body.decode(), "headers": dict(message.headers), "id": message.id}


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
