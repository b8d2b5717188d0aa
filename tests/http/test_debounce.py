"""Per-principal debounce: a sliding window on the store, 429 with Retry-After at the edge."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator
from typing import Any

import flask
import httpx
import pytest
from fastapi import Depends, FastAPI

from mideng.errors import ConfigurationError, StoreUnavailableError
from mideng.http import fastapi as fa
from mideng.http import flask as fl
from mideng.http.core import Incoming
from mideng.http.debounce import Debouncer
from mideng.stores.base import Store
from mideng.stores.memory import MemoryStore
from tests.backends import Ctx, opened_store


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def user_of(request: Incoming) -> str | None:
    return request.headers.get("x-user")


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store(request: pytest.FixtureRequest, ctx: Ctx) -> Iterator[Store]:
    yield from opened_store(request.param, ctx)


def test_sliding_window_on_the_store_clock() -> None:
    now = [100.0]
    debouncer = Debouncer(MemoryStore(clock=lambda: now[0]), window=10, limit=2)
    assert debouncer.hit("ann", "POST /orders") is None
    now[0] = 101.0
    assert debouncer.hit("ann", "POST /orders") is None
    now[0] = 102.0
    assert debouncer.hit("ann", "POST /orders") == pytest.approx(8.0)
    # A refused call is not counted: the wait does not grow while the caller keeps trying.
    now[0] = 109.0
    assert debouncer.hit("ann", "POST /orders") == pytest.approx(1.0)
    now[0] = 110.5
    assert debouncer.hit("ann", "POST /orders") is None  # the call at 100 left the window
    assert debouncer.hit("ann", "POST /orders") == pytest.approx(0.5)
    # Other principals and other operations have their own windows.
    assert debouncer.hit("bob", "POST /orders") is None
    assert debouncer.hit("ann", "POST /refunds") is None


def test_concurrent_calls_let_exactly_one_through(store: Store) -> None:
    debouncer = Debouncer(store, window=30, limit=1)
    barrier = threading.Barrier(20)

    def call(_: int) -> float | None:
        barrier.wait()
        return debouncer.hit("ann", "POST /orders")

    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        waits = list(pool.map(call, range(20)))
    assert waits.count(None) == 1
    assert all(0 < w <= 30 for w in waits if w is not None)


def test_long_principals_are_hashed_into_a_short_key() -> None:
    key = Debouncer.key("u" * 500, "POST /x")
    assert key.startswith("sha256:")
    assert len(key) < 100


def test_a_separator_in_the_principal_never_shares_a_window(store: Store) -> None:
    pairs = [("a|b", "c"), ("a", "b|c"), ("a\\", "|c"), ("a\\|", "c"), ("a", "\\|c")]
    keys = {Debouncer.key(who, op) for who, op in pairs}
    assert len(keys) == len(pairs)
    debouncer = Debouncer(store, window=30, limit=1)
    assert all(debouncer.hit(who, op) is None for who, op in pairs)  # one window each
    assert debouncer.hit("a|b", "c") is not None


@pytest.mark.parametrize(
    "options",
    [
        {"window": 0},
        {"window": -1},
        {"limit": 0},
        {"limit": 1.5},
        {"window": True},
        {"window": float("inf")},
        {"window": float("nan")},
    ],
)
def test_bad_settings_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        Debouncer(MemoryStore(), **options)


def check_refusal(response: httpx.Response | Any, window: int) -> None:
    assert response.status_code == 429
    assert response.headers["content-type"] == "application/problem+json"
    assert 1 <= int(response.headers["retry-after"]) <= window


@pytest.mark.anyio
async def test_fastapi_dependency() -> None:
    debouncer = Debouncer(MemoryStore(), window=2)
    app = FastAPI()
    fa.install_problem_handler(app)

    @app.post("/orders/{shop}", dependencies=[Depends(fa.debounce(debouncer, user_of))])
    async def create(shop: str) -> dict[str, Any]:
        return {"shop": shop}

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        assert (await c.post("/orders/a", headers={"x-user": "ann"})).status_code == 200
        # The window is per route template: another shop is the same operation.
        check_refusal(await c.post("/orders/b", headers={"x-user": "ann"}), 2)
        assert (await c.post("/orders/a", headers={"x-user": "bob"})).status_code == 200
        # Anonymous callers are not debounced (they would share one bucket).
        assert (await c.post("/orders/a")).status_code == 200
        assert (await c.post("/orders/a")).status_code == 200
    assert debouncer.key("ann", "POST /orders/{shop}") == "ann|POST /orders/{shop}"


def test_flask_decorator() -> None:
    debouncer = Debouncer(MemoryStore(), window=2)
    app = flask.Flask(__name__)
    calls: list[str] = []

    @app.post("/orders")
    @fl.debounce(debouncer, user_of)
    def create() -> str:
        calls.append("ran")
        return "created"

    c = app.test_client()
    assert c.post("/orders", headers={"x-user": "ann"}).status_code == 200
    check_refusal(c.post("/orders", headers={"x-user": "ann"}), 2)
    assert calls == ["ran"]


@pytest.mark.parametrize(
    "exc",
    [StoreUnavailableError("down (test)"), ConnectionError("reset (test)"), TimeoutError("slow")],
    ids=lambda e: type(e).__name__,
)
def test_a_store_that_is_down_is_503_and_the_view_does_not_run(exc: Exception) -> None:
    """As for the idempotency middleware, a store's own I/O error let through unwrapped is
    the store being down (503), not a 500."""

    class Down(MemoryStore):
        def hit(self, scope: str, key: str, window: float, limit: int) -> float | None:
            raise exc

    app = flask.Flask(__name__)
    calls: list[str] = []

    @app.post("/orders")
    @fl.debounce(Debouncer(Down(), window=2), user_of)
    def create() -> str:
        calls.append("ran")
        return "created"

    refused = app.test_client().post("/orders", headers={"x-user": "ann"})
    assert refused.status_code == 503
    assert refused.content_type == "application/problem+json"
    assert refused.get_json()["type"] == "urn:mideng:problem:store-unavailable"
    assert calls == []
