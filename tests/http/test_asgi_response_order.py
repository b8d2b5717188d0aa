"""An application that breaks the response's order: a second start, or a start after body.

A server refuses either with an error in the application's ``send``; the capture held the
response back, kept whatever came last and stored it, so a retry replayed for the record's
whole life a response no client was ever meant to get (the first start's body under the
second's status). Refused the same way here: the application's error, the key released."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from mideng import Guard
from mideng.http import asgi
from mideng.stores.memory import MemoryStore
from tests.http.asgi_calls import App, Message, call, run

START: Message = {"type": "http.response.start", "status": 201, "headers": []}
OTHER: Message = {"type": "http.response.start", "status": 200, "headers": []}


def body(data: bytes, more: bool = False) -> Message:
    return {"type": "http.response.body", "body": data, "more_body": more}


def scripted(runs: list[int], steps: list[Message]) -> App:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        runs.append(1)
        for message in steps:
            await send(message)

    return app


@pytest.mark.parametrize(
    "steps",
    [
        [START, OTHER, body(b"ok")],
        [START, body(b"a", True), OTHER, body(b"b")],
        [body(b"ok"), START],
        [body(b"", True), START, body(b"ok")],
    ],
    ids=["two-starts", "start-after-some-body", "start-after-whole-body", "start-after-empty"],
)
def test_a_start_after_a_start_or_body_is_the_apps_error_and_nothing_is_stored(
    steps: list[Message],
) -> None:
    runs: list[int] = []
    guard = Guard(MemoryStore())
    app = asgi.IdempotencyMiddleware(scripted(runs, steps), guard=guard)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="start after"):
            run(call(app))
    assert guard.get("http:-", "k") is None
    assert runs == [1, 1]


def test_an_app_that_catches_the_refused_start_gets_its_first_response_stored() -> None:
    """The refusal is raised in the application's ``send``, as a server raises it: an
    application that carries on sends what a server would have sent, its first start."""
    runs: list[int] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        runs.append(1)
        await send(START)
        with contextlib.suppress(RuntimeError):
            await send(OTHER)
        await send(body(b"ok"))

    guard = Guard(MemoryStore())
    middleware = asgi.IdempotencyMiddleware(app, guard=guard)
    first, again = run(call(middleware)), run(call(middleware))
    assert (first.status, first.body) == (again.status, again.body) == (201, b"ok")
    assert runs == [1]
