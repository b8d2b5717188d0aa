"""A WSGI application whose response iterable fails in ``close()``: the response was complete,
so, as without the middleware, the client gets it and the error reaches the server after it;
the response is stored and a retry replays it rather than running the body again."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from mideng import Guard
from mideng.http import wsgi
from mideng.stores.memory import MemoryStore
from tests.http.test_hostile_wsgi import environ


class ClosingFails:
    """A complete body whose ``close()`` raises (an after-response hook that failed)."""

    def __init__(self, chunks: list[bytes], error: Exception | None) -> None:
        self.chunks, self.error = chunks, error
        self.closed = 0

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.chunks)

    def close(self) -> None:
        self.closed += 1
        if self.error is not None:
            raise self.error


def serve(app: Any, env: dict[str, Any]) -> tuple[str, bytes, Exception | None]:
    """What a server does: start, send every chunk, then close; an error from ``close`` is
    the server's to log, after the client has the response."""
    started: list[str] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        started.append(status)
        return lambda chunk: None

    result: Iterable[bytes] = app(env, start_response)
    sent = b"".join(result)
    close = getattr(result, "close", None)
    try:
        if close is not None:
            close()
    except Exception as exc:
        return started[-1], sent, exc
    return started[-1], sent, None


@pytest.mark.parametrize("status", ["201 Created", "503 Service Unavailable"])
def test_a_close_that_fails_after_a_complete_response_sends_it_first(status: str) -> None:
    runs: list[ClosingFails] = []

    def app(env: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        env["wsgi.input"].read()
        start_response(status, [("Content-Type", "text/plain")])
        runs.append(ClosingFails([b"pa", b"id"], LookupError("after-response hook (test)")))
        return runs[-1]

    guarded = wsgi.IdempotencyMiddleware(app, guard=Guard(MemoryStore()))
    first_status, body, error = serve(guarded, environ('"close-1"'))
    assert (first_status, body) == (status, b"paid")
    assert isinstance(error, LookupError)  # raised to the server, after the response
    assert runs[0].closed == 1
    again_status, again, _ = serve(guarded, environ('"close-1"'))
    assert (again_status, again) == (status, b"paid")
    # A stored answer replays; a 5xx is not stored, so its retry runs again.
    assert len(runs) == (1 if status.startswith("201") else 2)


def test_a_close_that_works_is_called_once_and_raises_nothing() -> None:
    bodies: list[ClosingFails] = []

    def app(env: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        bodies.append(ClosingFails([b"ok"], None))
        return bodies[-1]

    guarded = wsgi.IdempotencyMiddleware(app, guard=Guard(MemoryStore()))
    assert serve(guarded, environ('"close-2"')) == ("200 OK", b"ok", None)
    assert [b.closed for b in bodies] == [1]
