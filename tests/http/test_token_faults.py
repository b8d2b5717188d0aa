"""Resubmit tokens at the edge when the store or the business key fails: the token endpoint
and the submit answer a clear 4xx or 503 (problem+json), never a 500, and a view's own answer
stands when its token can't be given back. (The Django helpers: test_django_faults.py.)"""

from __future__ import annotations

import json
from typing import Any

import flask
import httpx
import pytest
from fastapi import FastAPI

from mideng.errors import ConfigurationError, StoreUnavailableError
from mideng.http import fastapi as fa
from mideng.http import flask as fl
from mideng.http.core import Incoming
from mideng.stores.memory import MemoryStore
from mideng.tokens import TokenService


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


DOWN = [StoreUnavailableError("down (test)"), ConnectionError("reset by peer (test)")]


class TokenFaults(MemoryStore):
    """A memory store whose ``put_token`` / ``take_token`` raise the error set for them."""

    def __init__(self, put: Exception | None = None, take: Exception | None = None) -> None:
        super().__init__()
        self.put, self.take = put, take

    def put_token(self, scope: str, key: str, token: str, ttl: float) -> None:
        if self.put is not None:
            raise self.put
        super().put_token(scope, key, token, ttl)

    def take_token(self, scope: str, key: str, token: str) -> bool:
        if self.take is not None:
            raise self.take
        return super().take_token(scope, key, token)


def user_key(request: Incoming) -> str:
    return f"{request.headers.get('x-user') or '-'}:order"


def problem_type(body: bytes) -> str:
    return str(json.loads(body)["type"]).rpartition(":")[2]


@pytest.mark.parametrize("exc", DOWN, ids=lambda e: type(e).__name__)
def test_flask_token_endpoint_with_the_store_down_is_503(exc: Exception) -> None:
    app = flask.Flask(__name__)
    store = TokenFaults(put=exc)
    app.add_url_rule("/token", view_func=fl.token_view(TokenService(store), user_key))
    with app.test_client() as c:
        answer = c.get("/token", headers={"x-user": "ann"})
        assert answer.status_code == 503
        assert answer.content_type == "application/problem+json"
        assert problem_type(answer.data) == "store-unavailable"
        assert int(answer.headers["retry-after"]) >= 1
        store.put = None
        assert c.get("/token", headers={"x-user": "ann"}).get_json()["token"]


@pytest.mark.anyio
@pytest.mark.parametrize("exc", DOWN, ids=lambda e: type(e).__name__)
async def test_fastapi_token_endpoint_with_the_store_down_is_503(exc: Exception) -> None:
    app = FastAPI()
    app.add_api_route("/token", fa.token_endpoint(TokenService(TokenFaults(put=exc)), user_key))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        answer = await c.get("/token", headers={"x-user": "ann"})
    assert answer.status_code == 503
    assert problem_type(answer.content) == "store-unavailable"


def test_a_business_key_the_store_cant_hold_is_a_400_at_the_token_endpoint_too() -> None:
    """The submit already answers a NUL in the business key with a 400; issuing for it did
    with a 500."""
    app = flask.Flask(__name__)
    tokens = TokenService(MemoryStore())
    app.add_url_rule("/token", view_func=fl.token_view(tokens, lambda r: "a\x00b:order"))
    answer = app.test_client().get("/token")
    assert answer.status_code == 400
    assert answer.content_type == "application/problem+json"


def test_a_store_io_error_at_the_submit_is_503_and_nothing_runs() -> None:
    ran: list[int] = []
    store = TokenFaults()
    tokens = TokenService(store)
    app = flask.Flask(__name__)

    @app.post("/submit")
    @fl.require_token(tokens, user_key)
    def submit() -> str:
        ran.append(1)
        return "ok"

    token = tokens.issue("-:order")
    store.take = ConnectionError("reset by peer (test)")
    with app.test_client() as c:
        answer = c.post("/submit", headers={"x-resubmit-token": token})
        assert (answer.status_code, problem_type(answer.data)) == (503, "store-unavailable")
        store.take = None
        assert c.post("/submit", headers={"x-resubmit-token": token}).status_code == 200
    assert ran == [1]


def test_a_store_io_error_at_the_restore_leaves_the_views_answer() -> None:
    store = TokenFaults()
    tokens = TokenService(store)
    app = flask.Flask(__name__)

    @app.post("/submit")
    @fl.require_token(tokens, user_key)
    def submit() -> tuple[str, int]:
        store.put = TimeoutError("timed out while restoring (test)")
        return "try later", 503

    token = tokens.issue("-:order")
    answer = app.test_client().post("/submit", headers={"x-resubmit-token": token})
    assert (answer.status_code, answer.data) == (503, b"try later")


@pytest.mark.parametrize("option", ["ttl", "restore_ttl"])
@pytest.mark.parametrize("value", [float("inf"), float("nan"), 0, -1, True])
def test_a_lifetime_no_store_can_keep_is_refused_when_the_service_is_made(
    option: str, value: float
) -> None:
    """An infinite ttl was accepted, then every issue failed (a 500 at the token endpoint,
    Redis refusing the expiry); the Guard's policy refuses it up front, and so does this."""
    options: dict[str, Any] = {option: value}
    with pytest.raises(ConfigurationError, match=option):
        TokenService(MemoryStore(), **options)


class Declined(Exception):
    """The business run's own failure."""


@pytest.mark.parametrize("exc", DOWN, ids=lambda e: type(e).__name__)
def test_spend_keeps_the_blocks_error_when_the_restore_fails(
    exc: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    """A restore the store refuses is logged; the block's error is what the caller sees
    (before, the store's error replaced it, and the business failure was lost)."""
    store = TokenFaults()
    tokens = TokenService(store)
    token = tokens.issue("u1:order")
    store.put = exc
    with pytest.raises(Declined, match="card declined"), tokens.spend("u1:order", token):
        raise Declined("card declined")
    assert [getattr(r, "mideng_outcome", None) for r in caplog.records] == ["token_not_restored"]
    store.put = None
    assert not tokens.consume("u1:order", token)  # not restored: the user fetches a new one


@pytest.mark.anyio
@pytest.mark.parametrize("exc", DOWN, ids=lambda e: type(e).__name__)
async def test_aspend_keeps_the_blocks_error_when_the_restore_fails(
    exc: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    store = TokenFaults()
    tokens = TokenService(store)
    token = await tokens.aissue("u1:order")
    store.put = exc
    with pytest.raises(Declined, match="card declined"):
        async with tokens.aspend("u1:order", token):
            raise Declined("card declined")
    assert [getattr(r, "mideng_outcome", None) for r in caplog.records] == ["token_not_restored"]
    store.put = None
    assert not await tokens.aconsume("u1:order", token)
