"""The same small application written for FastAPI and for Flask, and what its handlers saw.

Every handler counts its runs per label (tenant + Idempotency-Key), so a test can tell how
often the business code really ran. ``/slow`` holds its handler until the test releases it.
"""

from __future__ import annotations

import collections
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import anyio.to_thread
import flask
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from mideng.context import get_request_id
from mideng.core.record import Claim, ClaimRequest, Record, Ticket
from mideng.errors import StoreUnavailableError
from mideng.http.core import Incoming
from mideng.stores.memory import MemoryStore

HOLD_TIMEOUT = 30.0


class Recorder:
    """Runs per label, and gates that hold ``/slow`` until released."""

    def __init__(self) -> None:
        self.runs: collections.Counter[str] = collections.Counter()
        self._lock = threading.Lock()
        self._started: dict[str, threading.Event] = collections.defaultdict(threading.Event)
        self._release: dict[str, threading.Event] = collections.defaultdict(threading.Event)
        self._arrived = 0
        self._arrival = threading.Condition()

    def arrive(self) -> None:
        """Counted at the outermost layer, before any idempotency handling."""
        with self._arrival:
            self._arrived += 1
            self._arrival.notify_all()

    def wait_arrivals(self, count: int) -> None:
        with self._arrival:
            if not self._arrival.wait_for(lambda: self._arrived >= count, HOLD_TIMEOUT):
                raise TimeoutError(f"only {self._arrived} of {count} requests arrived")

    def ran(self, label: str) -> int:
        with self._lock:
            self.runs[label] += 1
            return self.runs[label]

    def count(self, label: str) -> int:
        with self._lock:
            return self.runs[label]

    def _events(self, label: str) -> tuple[threading.Event, threading.Event]:
        with self._lock:
            return self._started[label], self._release[label]

    def hold(self, label: str) -> None:
        started, release = self._events(label)
        started.set()
        if not release.wait(HOLD_TIMEOUT):
            raise TimeoutError(f"{label} was never released")

    def wait_started(self, label: str) -> None:
        if not self._events(label)[0].wait(HOLD_TIMEOUT):
            raise TimeoutError(f"{label} never started")

    def release(self, label: str) -> None:
        self._events(label)[1].set()


class FlakyStore(MemoryStore):
    """A memory store whose claims fail while ``down`` is set, like an unreachable server."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def claim(self, req: ClaimRequest) -> Claim:
        if self.down:
            raise StoreUnavailableError("store is down (test)")
        return super().claim(req)


class FaultyStore(MemoryStore):
    """A memory store whose ``claim``, ``complete`` or ``release`` (sync and async alike) raises
    the exception set for it, ``times`` times (None: always) — a raw ``ConnectionError`` or
    ``TimeoutError`` as a store that let its driver's error through would, or the
    ``StoreUnavailableError`` a store should raise."""

    def __init__(self, **faults: BaseException) -> None:
        super().__init__()
        self.faults = faults
        self.times: int | None = None
        self.raised = 0

    def _fault(self, operation: str) -> None:
        exc = self.faults.get(operation)
        if exc is not None and (self.times is None or self.raised < self.times):
            self.raised += 1
            raise exc

    def claim(self, req: ClaimRequest) -> Claim:
        self._fault("claim")
        return super().claim(req)

    def complete(self, ticket: Ticket, result: bytes, codec: str, ttl: float | None) -> Record:
        self._fault("complete")
        return super().complete(ticket, result, codec, ttl)

    def release(self, ticket: Ticket) -> None:
        self._fault("release")
        super().release(ticket)


def tenant_of(request: Incoming) -> str | None:
    return request.headers.get("x-tenant")


def label_of(headers: Callable[[str], str | None]) -> str:
    return f"{headers('x-tenant') or '-'}/{headers('idempotency-key')}"


def order(run: int, body: Any) -> dict[str, Any]:
    return {"run": run, "body": body, "nonce": uuid.uuid4().hex, "request_id": get_request_id()}


def chunks(count: int, size: int) -> Iterator[bytes]:
    for i in range(count):
        yield bytes([65 + i % 26]) * size


# -- counting arrivals, outside every other layer ---------------------------------------------
def counting_asgi(app: Any, rec: Recorder) -> Any:
    async def counted(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            rec.arrive()
        await app(scope, receive, send)

    return counted


def counting_wsgi(app: Any, rec: Recorder) -> Any:
    def counted(environ: Any, start_response: Any) -> Any:
        rec.arrive()
        return app(environ, start_response)

    return counted


# -- FastAPI ---------------------------------------------------------------------------------
def fastapi_app(rec: Recorder) -> FastAPI:
    app = FastAPI()

    def label(request: Request) -> str:
        return label_of(request.headers.get)

    @app.post("/orders", status_code=201)
    async def create(request: Request, response: Response) -> dict[str, Any]:
        raw = await request.body()
        run = rec.ran(label(request))
        response.set_cookie("session", "first")
        response.headers["x-custom"] = "kept"
        return order(run, raw.decode("utf-8", "replace"))

    @app.api_route("/any", methods=["POST", "PATCH", "PUT", "DELETE"])
    async def any_method(request: Request) -> dict[str, Any]:
        return order(rec.ran(label(request)), request.method)

    @app.post("/status/{code}")
    async def status(code: int, request: Request) -> Response:
        return JSONResponse(order(rec.ran(label(request)), code), status_code=code)

    @app.post("/slow")
    async def slow(request: Request) -> dict[str, Any]:
        name = label(request)
        run = rec.ran(name)
        await anyio.to_thread.run_sync(rec.hold, name)
        return order(run, None)

    @app.post("/stream")
    async def stream(request: Request) -> StreamingResponse:
        rec.ran(label(request))
        return StreamingResponse(chunks(3, 100), media_type="text/plain")

    @app.post("/big")
    async def big(request: Request) -> StreamingResponse:
        rec.ran(label(request))
        return StreamingResponse(chunks(10, 1000), media_type="text/plain")

    @app.post("/events")
    async def events(request: Request) -> StreamingResponse:
        rec.ran(label(request))
        return StreamingResponse(
            iter([b"data: 1\n\n", b"data: 2\n\n"]), media_type="text/event-stream"
        )

    return app


# -- Flask -----------------------------------------------------------------------------------
def flask_app(rec: Recorder) -> flask.Flask:
    app = flask.Flask(__name__)

    def label() -> str:
        return label_of(flask.request.headers.get)

    @app.post("/orders")
    def create() -> flask.Response:
        run = rec.ran(label())
        response = flask.jsonify(order(run, flask.request.get_data().decode("utf-8", "replace")))
        response.status_code = 201
        response.set_cookie("session", "first")
        response.headers["x-custom"] = "kept"
        return response

    @app.route("/any", methods=["POST", "PATCH", "PUT", "DELETE"])
    def any_method() -> flask.Response:
        return flask.jsonify(order(rec.ran(label()), flask.request.method))

    @app.post("/status/<int:code>")
    def status(code: int) -> tuple[flask.Response, int]:
        return flask.jsonify(order(rec.ran(label()), code)), code

    @app.post("/slow")
    def slow() -> flask.Response:
        name = label()
        run = rec.ran(name)
        rec.hold(name)
        return flask.jsonify(order(run, None))

    @app.post("/stream")
    def stream() -> flask.Response:
        rec.ran(label())
        return flask.Response(chunks(3, 100), mimetype="text/plain")

    @app.post("/big")
    def big() -> flask.Response:
        rec.ran(label())
        return flask.Response(chunks(10, 1000), mimetype="text/plain")

    @app.post("/events")
    def events() -> flask.Response:
        rec.ran(label())
        return flask.Response(iter([b"data: 1\n\n", b"data: 2\n\n"]), mimetype="text/event-stream")

    return app
