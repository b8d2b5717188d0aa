"""One request id from an HTTP request to a consumer's log line: the ASGI middleware binds
it, ``aadd`` keeps it on the row, the relay publishes it as ``x-request-id``, and the
consumer restores it for its handler and its log lines."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from mideng import Guard
from mideng.context import get_request_id
from mideng.http.asgi import RequestIdMiddleware
from mideng.http.request_id import RequestIdFilter
from mideng.messaging import IdempotentConsumer, Message, redis_streams
from mideng.outbox import Outbox, Relay
from mideng.stores.memory import MemoryStore
from tests.brokers import BrokerNames
from tests.services import REDIS_URL


def test_the_request_id_travels_from_the_request_to_the_consumer_log_line(
    tmp_path: Path, broker_names: BrokerNames, caplog: Any
) -> None:
    names = broker_names.redis_stream()
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'orders.db'}")
    outbox = Outbox(engine, table="mideng_outbox")
    handled: list[tuple[str | None, str]] = []
    log = logging.getLogger("tests.outbox.stock")

    async def place_order(request: Request) -> JSONResponse:
        async with engine.begin() as connection:
            message_id = await outbox.aadd(
                connection, names.stream, {"order": "order:42", "qty": 2}, key="order:42"
            )
        return JSONResponse({"message_id": message_id})

    def deduct(message: Message) -> None:
        handled.append((get_request_id(), json.loads(message.body)["order"]))
        log.info("stock deducted")

    app = RequestIdMiddleware(Starlette(routes=[Route("/orders", place_order, methods=["POST"])]))

    async def main() -> tuple[str, str, dict[bytes, bytes]]:
        await outbox.acreate_schema()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://shop") as client:
            response = await client.post("/orders", headers={"X-Request-Id": "req-order-42"})
        assert response.status_code == 200
        async with Relay(engine, REDIS_URL, table="mideng_outbox") as relay:
            assert (await relay.run_once()).sent == 1
        import redis.asyncio

        reader = redis.asyncio.Redis.from_url(REDIS_URL)
        try:
            entries: Any = await reader.xrange(names.stream)
            ((_, fields),) = entries
        finally:
            await reader.aclose()
        consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", deduct)
        stop = asyncio.Event()
        task = asyncio.create_task(
            redis_streams.consume(
                consumer, REDIS_URL, stream=names.stream, group=names.group, name="w1", stop=stop
            )
        )
        for _ in range(200):
            if handled:
                break
            await asyncio.sleep(0.025)
        stop.set()
        await asyncio.wait_for(task, 10)
        async with engine.connect() as connection:
            from sqlalchemy import text

            row = (
                await connection.execute(text("SELECT id, request_id, headers FROM mideng_outbox"))
            ).one()
        await engine.dispose()
        assert row.id == response.json()["message_id"]
        return str(row.request_id), str(row.headers), fields

    request_filter = RequestIdFilter()
    caplog.handler.addFilter(request_filter)
    try:
        with caplog.at_level(logging.INFO, logger="tests.outbox.stock"):
            row_request_id, row_headers, fields = asyncio.run(main())
    finally:
        caplog.handler.removeFilter(request_filter)
    assert row_request_id == "req-order-42"
    assert json.loads(row_headers)["x-request-id"] == "req-order-42"
    assert fields[b"x-request-id"] == b"req-order-42"
    assert fields[b"idempotency-key"] == b"order:42"
    assert handled == [("req-order-42", "order:42")]
    (line,) = [record for record in caplog.records if record.getMessage() == "stock deducted"]
    assert getattr(line, "request_id", None) == "req-order-42"
