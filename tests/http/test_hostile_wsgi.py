"""Hostile input to the WSGI middleware with hand-built environs, and the same store faults
through the Flask view decorator and the Django middleware: a 4xx or 503 for what the client
or the store did wrong, the application's own response for what it did, no body run twice."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import flask
import pytest

from mideng import Guard
from mideng.errors import StoreUnavailableError
from mideng.http import wsgi
from mideng.http.flask import idempotent
from mideng.stores.memory import MemoryStore
from tests.http.http_apps import FaultyStore

IO_ERRORS = [ConnectionError("reset by peer"), TimeoutError("read timed out"), OSError("EPIPE")]
ALL_ERRORS = [*IO_ERRORS, StoreUnavailableError("down")]


def environ(key: str | None = '"k"', body: bytes = b"{}", **extra: Any) -> dict[str, Any]:
    made: dict[str, Any] = {
        "REQUEST_METHOD": "POST",
        "SCRIPT_NAME": "",
        "PATH_INFO": "/x",
        "QUERY_STRING": "",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "SERVER_NAME": "t",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body),
    }
    if key is not None:
        made["HTTP_IDEMPOTENCY_KEY"] = key
    made.update(extra)
    return made


class Got:
    def __init__(self, status: str, headers: list[tuple[str, str]], body: bytes) -> None:
        self.status = int(status.split(" ", 1)[0])
        self.headers = {n.lower(): v for n, v in headers}
        self.body = body

    def problem(self) -> str:
        assert self.headers["content-type"] == "application/problem+json", self.body
        return str(json.loads(self.body)["type"]).rpartition(":")[2]


def call(app: Any, env: dict[str, Any] | None = None) -> Got:
    started: list[tuple[str, list[tuple[str, str]]]] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        started.append((status, headers))
        return lambda chunk: None

    result = app(environ() if env is None else env, start_response)
    try:
        body = b"".join(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    return Got(*started[-1], body)


WSGIApp = Callable[[dict[str, Any], Any], Iterable[bytes]]


def counting(
    runs: list[int],
    status: str = "201 Created",
    *,
    chunks: int = 1,
    size: int = 2,
    content_type: str = "text/plain",
    hold: float = 0.0,
) -> WSGIApp:
    def app(env: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        runs.append(1)
        env["wsgi.input"].read()
        if hold:
            time.sleep(hold)
        start_response(status, [("Content-Type", content_type)])
        return [b"x" * size for _ in range(chunks)]

    return app


def middleware(app: WSGIApp, store: Any = None, **options: Any) -> wsgi.IdempotencyMiddleware:
    return wsgi.IdempotencyMiddleware(app, guard=Guard(store or MemoryStore()), **options)


# -- store faults ----------------------------------------------------------------------------
@pytest.mark.parametrize("exc", IO_ERRORS, ids=lambda e: type(e).__name__)
def test_a_store_io_error_at_the_claim_is_503_and_nothing_runs(exc: Exception) -> None:
    runs: list[int] = []
    store = FaultyStore(claim=exc)
    store.times = 1
    app = middleware(counting(runs), store)
    refused = call(app)
    assert (refused.status, refused.problem()) == (503, "store-unavailable")
    assert runs == []
    first, again = call(app), call(app)
    assert first.status == again.status == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert runs == [1]


@pytest.mark.parametrize("exc", ALL_ERRORS, ids=lambda e: type(e).__name__)
def test_a_failed_completion_sends_the_response_and_a_retry_never_reruns(exc: Exception) -> None:
    runs: list[int] = []
    app = middleware(counting(runs), FaultyStore(complete=exc))
    first = call(app)
    assert (first.status, first.body) == (201, b"xx")
    retry = call(app)
    assert (retry.status, retry.problem()) == (409, "key-in-use")
    assert runs == [1]


@pytest.mark.parametrize("exc", ALL_ERRORS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("kind", ["too-big", "event-stream", "5xx"])
def test_a_failed_release_still_sends_the_response(exc: Exception, kind: str) -> None:
    """Over WSGI a streamed response is sent after the Guard returns: a release failing with
    an error the store did not wrap was a 500 in its place, though the app had run."""
    runs: list[int] = []
    app_of = {
        "too-big": counting(runs, "200 OK", chunks=3, size=600),
        "event-stream": counting(runs, "200 OK", content_type="text/event-stream"),
        "5xx": counting(runs, "503 Service Unavailable"),
    }
    app = middleware(app_of[kind], FaultyStore(release=exc), max_response=1000)
    got = call(app)
    assert got.status == (503 if kind == "5xx" else 200)
    assert got.body == (b"x" * 1800 if kind == "too-big" else b"xx")
    assert runs == [1]


def test_flask_view_store_io_error_is_503() -> None:
    store = FaultyStore(claim=ConnectionError("reset"))
    runs: list[int] = []
    app = flask.Flask(__name__)

    @app.post("/pay")
    @idempotent(Guard(store))
    def pay() -> tuple[str, int]:
        runs.append(1)
        return "paid", 201

    with app.test_client() as c:
        refused = c.post("/pay", headers={"Idempotency-Key": '"f"'})
        assert refused.status_code == 503
        assert refused.json is not None
        assert refused.json["type"] == "urn:mideng:problem:store-unavailable"
        store.faults.clear()
        assert c.post("/pay", headers={"Idempotency-Key": '"f"'}).status_code == 201
        again = c.post("/pay", headers={"Idempotency-Key": '"f"'})
        assert again.headers["Idempotent-Replayed"] == "true"
    assert runs == [1]


# -- request headers and bodies --------------------------------------------------------------
@pytest.mark.parametrize(
    "key",
    [
        "",
        "  ",
        '""',
        '"' + "k" * 256 + '"',
        "k" * 10_000,
        '"caf\xe9"',
        '"\xff\xfe"',
        '"a\x00b"',
        "a\x01b",
        '"a", "b"',
        '"a","a"',
        "?0",
        '"a\\nb"',
        '"open',
    ],
)
def test_malformed_keys_are_400(key: str) -> None:
    runs: list[int] = []
    got = call(middleware(counting(runs)), environ(key))
    assert (got.status, got.problem()) == (400, "key-malformed")
    assert runs == []


@pytest.mark.parametrize(
    ("length", "body", "seen"),
    [
        ("-3", b"{}", b""),  # no length: PEP 3333 reads no body
        ("abc", b"{}", b""),
        ("9" * 5000, b"{}", b""),
        ("10", b"{}", b"{}"),  # longer than the body: what there is
        ("1", b"{}", b"{"),  # shorter: the declared bytes, to the app as to the fingerprint
        (" 2 ", b"{}", b"{}"),
    ],
)
def test_a_content_length_that_lies_is_never_a_500(length: str, body: bytes, seen: bytes) -> None:
    bodies: list[bytes] = []

    def app(env: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        bodies.append(env["wsgi.input"].read())
        start_response("201 Created", [])
        return [b"ok"]

    guarded = middleware(app, max_body=100)
    first = call(guarded, environ(body=body, CONTENT_LENGTH=length))
    again = call(guarded, environ(body=body, CONTENT_LENGTH=length))
    assert first.status == again.status == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert bodies == [seen]


def test_bodies_at_the_limit_with_a_length_or_terminated_input() -> None:
    runs: list[int] = []
    app = middleware(counting(runs), max_body=10)
    assert call(app, environ('"a"', b"x" * 10)).status == 201
    assert call(app, environ('"b"', b"x" * 11)).problem() == "body-too-large"
    ended = {"CONTENT_LENGTH": "", "wsgi.input_terminated": True}
    assert call(app, environ('"c"', b"x" * 10, **ended)).status == 201
    assert call(app, environ('"d"', b"x" * 11, **ended)).problem() == "body-too-large"
    no_input = environ('"e"')
    del no_input["wsgi.input"]
    assert call(app, no_input).status == 201
    assert runs == [1, 1, 1]


class BrokenInput(io.RawIOBase):
    """A server's ``wsgi.input`` whose read fails: the client went away mid-body."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def read(self, size: int = -1) -> bytes:
        raise self.exc


@pytest.mark.parametrize("terminated", [False, True], ids=["length", "terminated"])
@pytest.mark.parametrize("exc", IO_ERRORS, ids=lambda e: type(e).__name__)
def test_a_body_the_server_could_not_read_is_a_400_and_claims_nothing(
    exc: Exception, terminated: bool
) -> None:
    """Was a 500 from the server (the input's error left the middleware); nothing is claimed,
    so the client's resend runs once."""
    runs: list[int] = []
    app = middleware(counting(runs))
    extra: dict[str, Any] = {"wsgi.input": BrokenInput(exc)}
    if terminated:
        extra.update(CONTENT_LENGTH="", **{"wsgi.input_terminated": True})
    refused = call(app, environ('"cut"', **extra))
    assert (refused.status, refused.problem()) == (400, "body-unreadable")
    assert runs == []
    first, again = call(app, environ('"cut"')), call(app, environ('"cut"'))
    assert (first.status, again.status) == (201, 201)
    assert again.headers["idempotent-replayed"] == "true"
    assert runs == [1]


# -- applications ----------------------------------------------------------------------------
def test_an_app_that_never_starts_its_response_is_its_own_error_and_releases() -> None:
    runs: list[int] = []

    def app(env: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        runs.append(1)
        return [b"no start"]

    guard = Guard(MemoryStore())
    guarded = wsgi.IdempotencyMiddleware(app, guard=guard)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="start_response"):
            call(guarded)
    assert guard.get("http:-", "k") is None
    assert runs == [1, 1]


@pytest.mark.parametrize("status", ["500 Internal Server Error", "503 X", "429 Too Many"])
def test_retry_later_statuses_are_sent_not_stored(status: str) -> None:
    runs: list[int] = []
    app = middleware(counting(runs, status))
    assert call(app).status == call(app).status == int(status[:3])
    assert runs == [1, 1]


# -- concurrency -----------------------------------------------------------------------------
@pytest.mark.parametrize("in_progress", ["raise", "wait"])
def test_identical_requests_in_threads_run_the_body_once(in_progress: str) -> None:
    runs: list[int] = []
    app = middleware(counting(runs, hold=0.2), in_progress=in_progress)
    got: list[Got] = []
    lock = threading.Lock()

    def one() -> None:
        answer = call(app, environ(body=b'{"same": 1}'))
        with lock:
            got.append(answer)

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert runs == [1]
    statuses = sorted(g.status for g in got)
    assert statuses == ([201] * 6 if in_progress == "wait" else [201] + [409] * 5)
    assert call(app, environ(body=b'{"same": 2}')).problem() == "key-reused"


# -- resubmit tokens -------------------------------------------------------------------------
def test_a_token_that_cannot_be_restored_leaves_the_views_answer() -> None:
    """A view that failed gives its token back; when the store is down for that, the view's
    own 5xx (or its exception) still stands, not the store's error in its place."""
    from mideng.http.flask import require_token
    from mideng.tokens import TokenService

    class NoRestore(MemoryStore):
        issued = 0

        def put_token(self, scope: str, key: str, token: str, ttl: float) -> None:
            if self.issued:  # issuing works; the restore after the view finds the store down
                raise StoreUnavailableError("down while restoring (test)")
            self.issued += 1
            super().put_token(scope, key, token, ttl)

    store = NoRestore()
    tokens = TokenService(store, ttl=60)
    app = flask.Flask(__name__)

    @app.post("/submit")
    @require_token(tokens, lambda request: "bob:submit")
    def submit() -> tuple[str, int]:
        if flask.request.args.get("raise"):
            raise LookupError("the view's own error")
        return "try later", 503

    with app.test_client() as c:
        token = tokens.issue("bob:submit")
        answer = c.post("/submit", headers={"x-resubmit-token": token})
        assert (answer.status_code, answer.data) == (503, b"try later")
        app.testing = True  # the view's exception reaches the test
        store.issued = 0
        token = tokens.issue("bob:submit")
        with pytest.raises(LookupError):
            c.post("/submit?raise=1", headers={"x-resubmit-token": token})
