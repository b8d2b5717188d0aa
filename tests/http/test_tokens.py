"""Anti-resubmit tokens: one winner among concurrent consumes, restore, expiry; and the FastAPI
and Flask helpers around them (the Django ones are in test_http_django.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Iterator
from typing import Any

import flask
import httpx
import pytest
from fastapi import Depends, FastAPI, HTTPException

from mideng.errors import TokenRejectedError
from mideng.http import fastapi as fa
from mideng.http import flask as fl
from mideng.http.core import Incoming
from mideng.stores.base import Store
from mideng.stores.memory import MemoryStore
from mideng.tokens import TokenService
from tests.backends import Ctx, opened_store

CONCURRENT = 100


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store(request: pytest.FixtureRequest, ctx: Ctx) -> Iterator[Store]:
    yield from opened_store(request.param, ctx)


def test_concurrent_consumes_have_exactly_one_winner(store: Store) -> None:
    tokens = TokenService(store, ttl=60)
    token = tokens.issue("u1:order_create")
    barrier = threading.Barrier(CONCURRENT)

    def consume() -> bool:
        barrier.wait()
        return tokens.consume("u1:order_create", token)

    with concurrent.futures.ThreadPoolExecutor(CONCURRENT) as pool:
        results = list(pool.map(lambda _: consume(), range(CONCURRENT)))
    assert results.count(True) == 1


@pytest.mark.anyio
async def test_concurrent_async_consumes_have_exactly_one_winner(store: Store) -> None:
    tokens = TokenService(store, ttl=60)
    try:
        token = await tokens.aissue("u2:pay")
        results = await asyncio.gather(
            *(tokens.aconsume("u2:pay", token) for _ in range(CONCURRENT))
        )
    finally:
        await store.aclose()  # async connections belong to this test's loop
    assert results.count(True) == 1


def test_restore_makes_a_consumed_token_usable_again(store: Store) -> None:
    tokens = TokenService(store, ttl=60)
    token = tokens.issue("u3:order")
    assert tokens.consume("u3:order", token)
    assert not tokens.consume("u3:order", token)
    tokens.restore("u3:order", token)
    assert tokens.consume("u3:order", token)


def test_tokens_are_bound_to_their_key_and_replaced_by_a_new_issue(store: Store) -> None:
    tokens = TokenService(store, ttl=60)
    first = tokens.issue("u4:order")
    assert not tokens.consume("u5:order", first)
    second = tokens.issue("u4:order")
    assert not tokens.consume("u4:order", first)
    assert tokens.consume("u4:order", second)


def test_expired_tokens_are_refused(store: Store) -> None:
    tokens = TokenService(store, ttl=0.05)
    token = tokens.issue("u6:order")
    # The TTL runs on the store's own clock (Redis PX, SQLite's now), so real time must pass.
    time.sleep(0.3)
    assert not tokens.consume("u6:order", token)


def test_expiry_follows_the_store_clock() -> None:
    now = [1000.0]
    tokens = TokenService(MemoryStore(clock=lambda: now[0]), ttl=1800)
    token = tokens.issue("u7:order")
    now[0] += 1799
    assert tokens.consume("u7:order", token)
    tokens.restore("u7:order", token)
    now[0] += 1800.5
    assert not tokens.consume("u7:order", token)


def test_garbage_is_refused_without_a_store_call() -> None:
    class NoStore(MemoryStore):
        def take_token(self, scope: str, key: str, token: str) -> bool:
            raise AssertionError("store was asked")

    tokens = TokenService(NoStore())
    for garbage in (None, "", "short", "x" * 500, "has space and is long enough", 42):
        assert not tokens.consume("k", garbage)  # type: ignore[arg-type]
    with pytest.raises(TokenRejectedError):
        tokens.restore("k", "not a token!")


def test_spend_restores_only_when_the_block_fails() -> None:
    tokens = TokenService(MemoryStore())
    token = tokens.issue("k")
    with pytest.raises(ValueError, match="business"), tokens.spend("k", token):
        raise ValueError("business failure")
    with tokens.spend("k", token):
        pass
    with pytest.raises(TokenRejectedError), tokens.spend("k", token):
        pass


@pytest.mark.anyio
async def test_aspend_restores_only_when_the_block_fails() -> None:
    tokens = TokenService(MemoryStore())
    token = await tokens.aissue("k")
    with pytest.raises(ValueError, match="business"):
        async with tokens.aspend("k", token):
            raise ValueError("business failure")
    async with tokens.aspend("k", token):
        pass
    with pytest.raises(TokenRejectedError):
        async with tokens.aspend("k", token):
            pass


# -- framework helpers -----------------------------------------------------------------------
def user_key(request: Incoming) -> str:
    return f"{request.headers.get('x-user') or '-'}:order_create"


def fastapi_app(tokens: TokenService) -> FastAPI:
    app = FastAPI()
    fa.install_problem_handler(app)
    app.add_api_route("/token", fa.token_endpoint(tokens, user_key), methods=["POST"])

    @app.post("/submit")
    async def submit(
        fail: bool = False, token: str = Depends(fa.require_token(tokens, user_key))
    ) -> dict[str, Any]:
        if fail:
            raise HTTPException(503, "downstream failed")
        return {"ok": True}

    return app


@pytest.mark.anyio
async def test_fastapi_token_endpoint_and_dependency() -> None:
    tokens = TokenService(MemoryStore(), ttl=60)
    transport = httpx.ASGITransport(app=fastapi_app(tokens))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        issued = (await c.post("/token", headers={"x-user": "ann"})).json()
        assert issued["header"] == "X-Resubmit-Token"
        token = issued["token"]
        missing = await c.post("/submit", headers={"x-user": "ann"})
        assert missing.status_code == 400
        assert missing.headers["content-type"] == "application/problem+json"
        failed = await c.post(
            "/submit?fail=true", headers={"x-user": "ann", "x-resubmit-token": token}
        )
        assert failed.status_code == 503
        ok = await c.post("/submit", data={"resubmit_token": token}, headers={"x-user": "ann"})
        assert ok.status_code == 200
        again = await c.post("/submit", headers={"x-user": "ann", "x-resubmit-token": token})
        assert again.status_code == 409
        assert again.json()["type"] == "urn:mideng:problem:token-rejected"


def test_flask_token_view_and_decorator() -> None:
    tokens = TokenService(MemoryStore(), ttl=60)
    app = flask.Flask(__name__)
    app.add_url_rule("/token", view_func=fl.token_view(tokens, user_key), methods=["POST"])

    @app.post("/submit")
    @fl.require_token(tokens, user_key)
    def submit() -> tuple[dict[str, Any], int]:
        if flask.request.args.get("fail"):
            raise RuntimeError("business failure")
        return {"ok": True}, 200

    c = app.test_client()
    token = c.post("/token", headers={"x-user": "bob"}).get_json()["token"]
    assert c.post("/submit", headers={"x-user": "bob"}).status_code == 400
    failed = c.post("/submit?fail=1", headers={"x-user": "bob", "x-resubmit-token": token})
    assert failed.status_code == 500
    assert (
        c.post("/submit", data={"resubmit_token": token}, headers={"x-user": "bob"}).status_code
        == 200
    )
    refused = c.post("/submit", headers={"x-user": "bob", "x-resubmit-token": token})
    assert refused.status_code == 409
    assert refused.content_type == "application/problem+json"


def test_store_failure_is_503_and_nothing_runs() -> None:
    from mideng.errors import StoreUnavailableError

    class DownStore(MemoryStore):
        def take_token(self, scope: str, key: str, token: str) -> bool:
            raise StoreUnavailableError("down")

    tokens = TokenService(DownStore())
    app = flask.Flask(__name__)
    ran: list[int] = []

    @app.post("/submit")
    @fl.require_token(tokens, user_key)
    def submit() -> str:
        ran.append(1)
        return "ok"

    response = app.test_client().post("/submit", headers={"x-resubmit-token": "t" * 32})
    assert response.status_code == 503
    assert ran == []
