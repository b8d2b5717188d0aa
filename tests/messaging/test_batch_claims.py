"""One beat renews a whole batch, yet each key keeps its own lease: a key fenced while the
batch runs is not started while the others are, and a key whose handler failed is renewed no
more (its backoff lease is left to run out)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from mideng import Guard
from mideng.core.record import Ticket
from mideng.errors import LeaseLostError
from mideng.messaging import Ack, IdempotentConsumer, Message, Retry, Verdict
from mideng.stores.memory import MemoryStore

LEASE = 0.3


def msg(key: str) -> Message:
    return Message(b"{}", {"idempotency-key": key}, id=f"m-{key}")


class FencedStore(MemoryStore):
    """Answers every renewal of one key as a store whose record was taken over would."""

    def __init__(self, fenced: str) -> None:
        super().__init__()
        self.fenced = fenced
        self.renewed: Counter[str] = Counter()

    def heartbeat(self, ticket: Ticket, lease: float, ttl: float | None) -> Any:
        self.renewed[ticket.key] += 1
        if ticket.key == self.fenced:
            raise LeaseLostError(f"{ticket.key} was taken over")
        return super().heartbeat(ticket, lease, ttl)


class Runs:
    """Counts runs per key; ``slow`` holds three leases, ``fails`` raises on its first run."""

    def __init__(self, slow: str, fails: str | None = None) -> None:
        self.counts: Counter[str] = Counter()
        self.slow, self.fails = slow, fails

    async def __call__(self, message: Message) -> None:
        key = message.headers["idempotency-key"]
        self.counts[key] += 1
        if key == self.fails and self.counts[key] == 1:
            raise RuntimeError("first run fails")
        if key == self.slow:
            await asyncio.sleep(3 * LEASE)


def consumer(store: MemoryStore, runs: Runs) -> IdempotentConsumer:
    return IdempotentConsumer(Guard(store, lease=LEASE), "stock", runs, retry_delay=0.05)


def test_a_fenced_key_is_not_started_and_the_rest_of_the_batch_runs() -> None:
    store = FencedStore("order:2")
    runs = Runs(slow="order:1")
    keys = ["order:1", "order:2", "order:3"]
    verdicts = asyncio.run(consumer(store, runs).handle_batch([msg(k) for k in keys]))
    assert store.renewed["order:2"] >= 1  # its renewal was tried and fenced
    assert store.renewed["order:2"] < store.renewed["order:3"]  # and not tried again
    assert verdicts[0] == Ack(ran=True)
    assert isinstance(verdicts[1], Retry)
    assert "not held" in verdicts[1].reason
    assert verdicts[2] == Ack(ran=True)  # renewed all along, so started in its turn
    assert runs.counts == {"order:1": 1, "order:3": 1}


def test_a_key_whose_handler_failed_is_renewed_no_more() -> None:
    store = FencedStore("none")
    runs = Runs(slow="order:2", fails="order:1")
    first = consumer(store, runs)
    other = consumer(store, runs)

    async def scenario() -> tuple[list[Verdict], Verdict]:
        verdicts = await first.handle_batch([msg("order:1"), msg("order:2")])
        # order:1's backoff lease (0.05 s) ran out long ago unless the batch renewed it.
        return verdicts, await other.handle(msg("order:1"))

    verdicts, copy = asyncio.run(scenario())
    assert isinstance(verdicts[0], Retry)
    assert verdicts[1] == Ack(ran=True)
    assert store.renewed["order:1"] == 1  # only the backoff lease its failure set
    assert store.renewed["order:2"] >= 2
    assert copy == Ack(ran=True)
    assert runs.counts == {"order:1": 2, "order:2": 1}
