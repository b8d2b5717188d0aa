"""Messages whose key or request id is malformed in ways a broker lets through: the consumer
decides them (a dead letter for an unusable key, a run without the request id a store can't
hold) instead of raising into the adapter or sending them back for ever."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from mideng import Guard, open_store
from mideng.context import get_request_id
from mideng.messaging import Ack, DeadLetter, IdempotentConsumer, Message, Verdict
from mideng.stores.memory import MemoryStore
from tests.services import POSTGRES_URL, REDIS_URL, need


class Unspeakable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no words")


def msg(key: str, **headers: str) -> Message:
    return Message(b"{}", {"idempotency-key": key, **headers}, id=f"m-{key}")


@pytest.mark.parametrize("batch", [False, True])
def test_a_key_function_error_whose_text_cannot_be_read_is_a_dead_letter(batch: bool) -> None:
    # Raised out of handle (the adapter's loop with it), or, in a batch, every message of the
    # batch sent back for ever with the one that can never be decided.
    runs: list[str] = []

    def key(message: Message) -> str:
        if message.headers["idempotency-key"] == "order:bad":
            raise Unspeakable
        return message.headers["idempotency-key"]

    guard = Guard(MemoryStore(), lease=5)
    c = IdempotentConsumer(
        guard, "stock", lambda m: runs.append(m.headers["idempotency-key"]), key=key
    )
    if batch:
        verdicts = asyncio.run(c.handle_batch([msg("order:bad"), msg("order:1")]))
    else:
        verdicts = [asyncio.run(c.handle(msg("order:bad"))), asyncio.run(c.handle(msg("order:1")))]
    assert isinstance(verdicts[0], DeadLetter)
    assert "Unspeakable" in verdicts[0].reason
    assert verdicts[1] == Ack(ran=True)
    assert runs == ["order:1"]


@pytest.fixture(params=["postgresql-nul", "redis-surrogate"])
def store_and_id(request: pytest.FixtureRequest) -> Iterator[tuple[Any, str]]:
    if request.param == "postgresql-nul":
        need("postgresql")
        table = f"mideng_rid_{uuid.uuid4().hex[:10]}"
        store = open_store(POSTGRES_URL, table=table)
        yield store, "req\x00one"
        store.close()
        engine = create_engine(POSTGRES_URL)
        with engine.begin() as conn:
            conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
        engine.dispose()
    else:
        need("redis")
        store = open_store(REDIS_URL, prefix=f"mideng-rid-{uuid.uuid4().hex[:10]}")
        yield store, "req\udcffone"
        store.close()


@pytest.mark.parametrize("batch", [False, True])
def test_a_request_id_no_store_can_hold_is_left_out_not_retried_for_ever(
    store_and_id: tuple[Any, str], batch: bool
) -> None:
    # The request id goes into the claim: a store that refuses it refused every claim of the
    # message (and of the batch it came in), so they came back, undecided, for ever.
    store, rid = store_and_id
    seen: list[str | None] = []
    c = IdempotentConsumer(Guard(store, lease=5), "stock", lambda m: seen.append(get_request_id()))
    bad = msg(f"order:{uuid.uuid4().hex}", **{"x-request-id": rid})
    good = msg(f"order:{uuid.uuid4().hex}", **{"x-request-id": "req-two"})

    async def decide() -> list[Verdict]:
        try:
            if batch:
                return await c.handle_batch([bad, good])
            return [await c.handle(bad), await c.handle(good)]
        finally:
            await store.aclose()  # this loop's connections

    assert asyncio.run(decide()) == [Ack(ran=True), Ack(ran=True)]
    assert seen == [None, "req-two"]
