"""The shared core's decisions, one at a time, driven through the ASGI middleware in-process."""

from __future__ import annotations

import re
import threading
from typing import Any

import anyio
import httpx
import pytest
from fastapi import BackgroundTasks, FastAPI

from mideng import Guard
from mideng.core.record import Record, Ticket
from mideng.errors import ConfigurationError, StoreUnavailableError
from mideng.http import asgi
from mideng.http.core import HttpOptions, Incoming, Route, StoredResponse
from mideng.http.exchange import replayed, storable
from mideng.http.headers import Headers
from mideng.stores.memory import MemoryStore


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def request(path: str = "/x", method: str = "POST", **headers: str) -> Incoming:
    return Incoming(method, path, "", Headers((k.replace("_", "-"), v) for k, v in headers.items()))


def options(**kwargs: Any) -> HttpOptions:
    return HttpOptions(guard=Guard(MemoryStore()), **kwargs)


@pytest.mark.parametrize(
    "bad",
    [
        {"in_progress": "maybe"},
        {"max_body": -1},
        {"max_response": 1.5},
        {"wait_timeout": 0},
        {"scope_prefix": ""},
        {"scope_prefix": "token"},
        {"scope_prefix": "hit"},
    ],
)
def test_bad_options_fail_at_start_up(bad: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError):
        options(**bad)
    with pytest.raises(ConfigurationError):
        HttpOptions.build(Guard(MemoryStore()), {"requierd": True})


def test_routes_decide_methods_requirement_and_exemption() -> None:
    opts = options(
        routes=[
            Route("/pay", required=True),
            Route("/orders/*", methods=["PUT"]),
            Route(re.compile(r"/carts/\d+"), guarded=False),
        ]
    )
    assert isinstance(opts.plan(request("/pay")), StoredResponse)  # 400: key required
    assert opts.plan(request("/orders/1", "POST", idempotency_key='"k"')) is None
    assert opts.plan(request("/orders/1", "PUT", idempotency_key='"k"')) is not None
    assert opts.plan(request("/carts/12", idempotency_key='"k"')) is None
    assert opts.plan(request("/other", "GET", idempotency_key='"k"')) is None


def test_scopes_follow_the_principal_and_stay_short() -> None:
    opts = options(principal=lambda r: r.headers.get("x-tenant"))
    assert opts.scope_for(request(x_tenant="acme")) == "http:acme"
    assert opts.scope_for(request()) == "http:-"
    long = opts.scope_for(request(x_tenant="t" * 300))
    assert long.startswith("http:#")
    assert len(long) <= 128
    assert long != opts.scope_for(request(x_tenant="t" * 299 + "u"))


def test_stored_headers_drop_connection_specific_ones() -> None:
    response = StoredResponse(
        200,
        (
            ("content-type", "text/plain"),
            ("connection", "close, x-trace"),
            ("x-trace", "1"),
            ("keep-alive", "timeout=5"),
            ("set-cookie", "a=1"),
            ("date", "now"),
            ("x-kept", "yes"),
            ("content-length", "2"),
        ),
        b"ok",
    )
    assert storable(response).headers == (("content-type", "text/plain"), ("x-kept", "yes"))
    no_content = replayed(StoredResponse(204, (), b""), options())
    assert no_content.header("content-length") is None
    assert no_content.header("idempotent-replayed") == "true"


class LosingStore(MemoryStore):
    """Claims work; saving the result fails, as when the store goes away mid-request."""

    def complete(self, ticket: Ticket, result: bytes, codec: str, ttl: float | None) -> Record:
        raise StoreUnavailableError("lost the store (test)")


def counting_app(
    runs: list[int], hold: threading.Event | None = None, started: anyio.Event | None = None
) -> asgi.ASGIApp:
    async def app(scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        runs.append(1)
        if started is not None:
            started.set()
        if hold is not None:
            await anyio.to_thread.run_sync(hold.wait, 30)
        await send(
            {
                "type": "http.response.start",
                "status": 201,
                "headers": [(b"content-type", b"text/plain")],
            }
        )
        await send({"type": "http.response.body", "body": b"created %d" % len(runs)})

    return app


@pytest.mark.anyio
async def test_the_client_gets_the_response_even_when_it_cannot_be_stored() -> None:
    runs: list[int] = []
    app = asgi.IdempotencyMiddleware(counting_app(runs), guard=Guard(LosingStore()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c:
        response = await c.post("/", headers={"idempotency-key": '"k"'})
    assert response.status_code == 201
    assert response.content == b"created 1"
    assert runs == [1]


@pytest.mark.anyio
async def test_wait_mode_answers_409_when_the_wait_runs_out() -> None:
    runs: list[int] = []
    hold = threading.Event()
    started = anyio.Event()
    app = asgi.IdempotencyMiddleware(
        counting_app(runs, hold, started),
        guard=Guard(MemoryStore()),
        in_progress="wait",
        wait_timeout=0.2,
    )
    async with (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as c,
        anyio.create_task_group() as tg,
    ):
        first: list[httpx.Response] = []

        async def first_call() -> None:
            first.append(await c.post("/", headers={"idempotency-key": '"w"'}))

        tg.start_soon(first_call)
        await started.wait()  # the first call holds the key
        waited = await c.post("/", headers={"idempotency-key": '"w"'})
        hold.set()
    assert waited.status_code == 409
    assert waited.json()["type"] == "urn:mideng:problem:key-in-use"
    assert first[0].status_code == 201
    assert runs == [1]


@pytest.mark.anyio
async def test_a_failing_background_task_does_not_undo_the_response() -> None:
    runs: list[int] = []
    app = FastAPI()

    def fail() -> None:
        raise RuntimeError("background failed")

    @app.post("/orders", status_code=201)
    async def create(tasks: BackgroundTasks) -> dict[str, int]:
        runs.append(1)
        tasks.add_task(fail)
        return {"run": len(runs)}

    app.add_middleware(asgi.IdempotencyMiddleware, guard=Guard(MemoryStore()))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        first = await c.post("/orders", headers={"idempotency-key": '"bg"'})
        again = await c.post("/orders", headers={"idempotency-key": '"bg"'})
    assert first.status_code == again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert runs == [1]
