"""Guarding one endpoint only: the FastAPI route class and the Flask view decorator."""

from __future__ import annotations

import uuid
from typing import Any

import flask
import httpx
import pytest
from fastapi import APIRouter, BackgroundTasks, FastAPI, HTTPException
from pydantic import BaseModel

from mideng import Guard
from mideng.errors import ConfigurationError
from mideng.http import flask as fl
from mideng.http.fastapi import idempotent_route
from mideng.stores.memory import MemoryStore


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Order(BaseModel):
    item: str
    qty: int


def new_key() -> str:
    return f'"{uuid.uuid4().hex}"'


def fastapi_app(guard: Guard, calls: list[str]) -> FastAPI:
    router = APIRouter(route_class=idempotent_route(guard, required=True))

    @router.post("/orders", status_code=201)
    async def create(order: Order, tasks: BackgroundTasks) -> dict[str, Any]:
        calls.append(order.item)
        tasks.add_task(calls.append, "background")
        if order.qty < 0:
            raise HTTPException(400, "negative quantity")
        return {"item": order.item, "nonce": uuid.uuid4().hex}

    app = FastAPI()
    app.include_router(router, prefix="/v1")

    @app.post("/plain")
    async def plain() -> dict[str, Any]:
        calls.append("plain")
        return {"nonce": uuid.uuid4().hex}

    return app


@pytest.mark.anyio
async def test_fastapi_route_class_guards_only_its_routes() -> None:
    calls: list[str] = []
    guard = Guard(MemoryStore())
    transport = httpx.ASGITransport(app=fastapi_app(guard, calls))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        key = new_key()
        first = await c.post(
            "/v1/orders",
            json={"item": "pen", "qty": 1},
            headers={"idempotency-key": key, "x-request-id": "r-1"},
        )
        again = await c.post(
            "/v1/orders", json={"qty": 1, "item": "pen"}, headers={"idempotency-key": key}
        )
        assert first.status_code == again.status_code == 201
        assert again.content == first.content
        assert again.headers["idempotent-replayed"] == "true"
        assert first.headers["x-request-id"] == "r-1"
        assert calls == ["pen", "background"]
        mismatch = await c.post(
            "/v1/orders", json={"item": "ink", "qty": 1}, headers={"idempotency-key": key}
        )
        assert mismatch.status_code == 422
        missing = await c.post("/v1/orders", json={"item": "pen", "qty": 1})
        assert missing.status_code == 400
        assert missing.json()["type"] == "urn:mideng:problem:key-missing"
        # An HTTPException from the endpoint releases the key: the retry runs again.
        bad = new_key()
        for _ in range(2):
            refused = await c.post(
                "/v1/orders", json={"item": "neg", "qty": -1}, headers={"idempotency-key": bad}
            )
            assert refused.status_code == 400
        assert calls.count("neg") == 2
        # Routes outside the router are not guarded.
        for _ in range(2):
            await c.post("/plain", headers={"idempotency-key": new_key()})
        assert calls.count("plain") == 2


def flask_app(guard: Guard, calls: list[str]) -> flask.Flask:
    app = flask.Flask(__name__)

    @app.post("/orders")
    @fl.idempotent(guard, required=True, max_body=64)
    def create() -> tuple[dict[str, Any], int]:
        body = flask.request.get_json()
        calls.append(body["item"])
        if body["item"] == "missing":
            flask.abort(404)
        return {"item": body["item"], "nonce": uuid.uuid4().hex}, 201

    @app.post("/plain")
    def plain() -> str:
        calls.append("plain")
        return "ok"

    return app


def test_flask_decorator_guards_one_view() -> None:
    calls: list[str] = []
    guard = Guard(MemoryStore())
    c = flask_app(guard, calls).test_client()
    key = new_key()
    first = c.post("/orders", json={"item": "pen"}, headers={"idempotency-key": key})
    again = c.post("/orders", json={"item": "pen"}, headers={"idempotency-key": key})
    assert first.status_code == again.status_code == 201
    assert again.data == first.data
    assert again.headers["idempotent-replayed"] == "true"
    assert first.headers["x-request-id"]
    assert calls == ["pen"]
    assert (
        c.post("/orders", json={"item": "ink"}, headers={"idempotency-key": key}).status_code == 422
    )
    assert c.post("/orders", json={"item": "pen"}).status_code == 400
    too_big = c.post("/orders", json={"item": "x" * 100}, headers={"idempotency-key": new_key()})
    assert too_big.status_code == 413
    # abort() releases the key.
    gone = new_key()
    for _ in range(2):
        assert (
            c.post(
                "/orders", json={"item": "missing"}, headers={"idempotency-key": gone}
            ).status_code
            == 404
        )
    assert calls.count("missing") == 2


def test_unknown_option_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="unexpected keyword"):
        fl.idempotent(Guard(MemoryStore()), requird=True)
    with pytest.raises(ConfigurationError, match="in_progress"):
        idempotent_route(Guard(MemoryStore()), in_progress="sometimes")
