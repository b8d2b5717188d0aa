"""A guarded FastAPI endpoint's dependencies with ``yield`` are closed as FastAPI closes them.

FastAPI runs an endpoint inside an exit stack for its function-scoped dependencies and closes
it before the response is sent. The route class hands FastAPI a response that runs the
endpoint only when sent, after that stack was closed: a function-scoped dependency's teardown
(a session closed, a lock or a pool slot given back) never ran, once per guarded request."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, HTTPException

from mideng import Guard
from mideng.http.fastapi import idempotent_route
from mideng.stores.memory import MemoryStore


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def build(events: list[str], fail: bool = False) -> FastAPI:
    async def opened() -> AsyncIterator[str]:
        events.append("open")
        try:
            yield "session"
        finally:
            events.append("close")

    def synced() -> Iterator[str]:
        events.append("open-sync")
        try:
            yield "sync"
        finally:
            events.append("close-sync")

    async def for_request() -> AsyncIterator[str]:
        events.append("open-request")
        try:
            yield "request"
        finally:
            events.append("close-request")

    router = APIRouter(route_class=idempotent_route(Guard(MemoryStore()), required=True))

    @router.post("/orders", status_code=201)
    async def create(
        session: str = Depends(opened, scope="function"),
        sync: str = Depends(synced, scope="function"),
        request: str = Depends(for_request),
    ) -> dict[str, Any]:
        events.append("run")
        if fail:
            raise HTTPException(409, "refused")
        return {"session": session}

    app = FastAPI()
    app.include_router(router)
    return app


async def post(app: FastAPI, key: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.post("/orders", json={}, headers={"idempotency-key": f'"{key}"'})


@pytest.mark.anyio
async def test_function_scoped_dependencies_close_before_the_response() -> None:
    events: list[str] = []
    app = build(events)
    key = uuid.uuid4().hex
    first = await post(app, key)
    assert first.status_code == 201
    assert sorted(events) == sorted(
        ["open", "open-sync", "open-request", "run", "close", "close-sync", "close-request"]
    )
    assert events.index("close") > events.index("run")
    again = await post(app, key)  # a replay: the endpoint and its dependencies don't run
    assert again.headers["idempotent-replayed"] == "true"
    assert events.count("run") == events.count("close") == events.count("close-sync") == 1


@pytest.mark.anyio
async def test_function_scoped_dependencies_close_when_the_endpoint_raises() -> None:
    events: list[str] = []
    first = await post(build(events, fail=True), uuid.uuid4().hex)
    assert first.status_code == 409
    assert {"close", "close-sync", "close-request"} <= set(events)
