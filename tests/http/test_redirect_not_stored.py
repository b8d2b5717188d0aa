"""A redirect that asks for the same request at another URI (307, 308) is not stored.

Starlette answers ``POST /payments/`` with a 307 to ``/payments`` (``redirect_slashes``); a
client following it sends the same request, key included, to the new path. The 307 was
stored under the key as a final answer, so the followed request, another path under the same
key, got 422 ``key-reused``: the payment never ran, and every retry with that key met the same
422 for the record's whole life. Nothing was done at the first URI: the key is released, as
for the statuses that ask for the request again later, and the request it names runs once."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse
from starlette.routing import Route

from mideng import Guard
from mideng.http.asgi import IdempotencyMiddleware
from mideng.stores.memory import MemoryStore
from tests.http.asgi_calls import call, counting, middleware, run


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def payments(runs: list[int]) -> Starlette:
    async def pay(request: Request) -> JSONResponse:
        runs.append(1)
        return JSONResponse({"paid": await request.json()}, status_code=201)

    async def done(request: Request) -> RedirectResponse:
        runs.append(1)
        return RedirectResponse("/payments/1", status_code=303)

    app = Starlette(
        routes=[Route("/payments", pay, methods=["POST"]), Route("/done", done, methods=["POST"])]
    )
    app.add_middleware(IdempotencyMiddleware, guard=Guard(MemoryStore()))
    return app


async def post(app: Starlette, path: str, key: str, follow: bool) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://t", follow_redirects=follow
    ) as client:
        return await client.post(path, json={"n": 1}, headers={"idempotency-key": f'"{key}"'})


@pytest.mark.anyio
async def test_a_followed_trailing_slash_redirect_runs_the_request_once() -> None:
    runs: list[int] = []
    app = payments(runs)
    key = uuid.uuid4().hex
    first = await post(app, "/payments/", key, follow=True)
    assert [r.status_code for r in first.history] == [307]
    assert (first.status_code, first.json()) == (201, {"paid": {"n": 1}})
    again = await post(app, "/payments", key, follow=True)
    assert (again.status_code, again.json()) == (201, {"paid": {"n": 1}})
    assert again.headers["idempotent-replayed"] == "true"
    # The key now names the request at /payments: sent with the other path it is a 422, as
    # for any other path, and nothing runs again.
    elsewhere = await post(app, "/payments/", key, follow=True)
    assert elsewhere.status_code == 422
    assert runs == [1]


@pytest.mark.anyio
async def test_a_see_other_after_the_work_is_stored_and_replayed() -> None:
    runs: list[int] = []
    app = payments(runs)
    key = uuid.uuid4().hex
    first = await post(app, "/done", key, follow=False)
    again = await post(app, "/done", key, follow=False)
    assert first.status_code == again.status_code == 303
    assert again.headers["location"] == "/payments/1"
    assert again.headers["idempotent-replayed"] == "true"
    assert runs == [1]


def test_store_status_can_still_store_them() -> None:
    runs: list[int] = []
    app: Any = middleware(counting(runs, 307), store_status=lambda status: status < 500)
    first, second = run(call(app)), run(call(app))
    assert second.headers["idempotent-replayed"] == "true"
    assert first.status == second.status == 307
    assert runs == [1]
