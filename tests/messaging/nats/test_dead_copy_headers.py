"""A dead-lettered message's copy on the dead subject carries every header nats-py read from
it: one whose value nats-py could only decode with replacement characters (it was left out
of the copy), and one whose name nats-py reads but will not write, not being an HTTP token
(the copy was refused on every try, and the message nak'd and dead-lettered again for good);
that one rides in ``x-dead-letter-headers``, as JSON."""

from __future__ import annotations

import asyncio
import json

import pytest

from mideng.messaging import nats as adapter
from tests.brokers import BrokerNames
from tests.messaging.nats.test_consume import consuming, dead_copies, until, until_settled
from tests.messaging.running import dead_lettering
from tests.messaging.test_header_keys import Nats

pytestmark = pytest.mark.slow

#: As another client sends them; no business key, so the message is dead-lettered at once.
SENT = {
    "trace": b"span-\xff\xfe",
    "x/route": b"eu-1",
    "note": b"caf\xc3\xa9",
    adapter.NATS_MSG_ID: b"evt-7",
}


def test_the_dead_copy_carries_every_header_nats_py_read(broker_names: BrokerNames) -> None:
    broker = Nats(broker_names)
    side = broker.side
    dead = f"{side.names.subject}.dead"
    consumer, reasons = dead_lettering()

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(consuming(consumer, side, stop, dead_subject=dead))
        await until(lambda: bool(reasons))
        await asyncio.to_thread(until_settled, side, 10)  # terminated, not nak'd for ever
        stop.set()
        await asyncio.wait_for(task, 10)

    broker.publish([SENT])
    asyncio.run(scenario())
    [reason] = reasons
    [copy] = asyncio.run(dead_copies(side, dead))
    assert copy.headers == {
        # nats-py replaced the bytes that are not UTF-8 before the adapter saw them
        "trace": "span-\ufffd\ufffd",
        "note": "caf\xe9",
        adapter.DEAD_HEADERS: json.dumps({"x/route": "eu-1"}),
        adapter.NATS_MSG_ID: "evt-7:dead-letter",
        adapter.DEAD_LETTER_REASON: reason,
    }
    assert copy.data == b"{}"
