"""A request cancelled after its application answered in full keeps that answer.

Starlette runs a response's background tasks inside the application call, after the response
body; the middleware holds the response until that call returns. A server that cancels the
request's task then (a shutdown, a timeout around the request) used to release the key: the
body had run, and the client's retry ran it again. Cancelled before the answer is complete,
the key is still released, as for any error of the application.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mideng.stores.memory import MemoryStore
from tests.http.asgi_calls import KEY, Got, Message, middleware, request


def _scope() -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "path": "/x",
        "raw_path": b"/x",
        "query_string": b"",
        "headers": KEY,
    }


def _app(runs: list[int], answered: asyncio.Event, complete: bool, linger: bool = True) -> Any:
    """Answers 201 ``done`` (all of it, or the start and part of the body) and then, with
    ``linger``, waits as a background task or a slow stream would, until it is cancelled."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        runs.append(1)
        await receive()
        start = {"type": "http.response.start", "status": 201, "headers": []}
        await send(start)
        await send({"type": "http.response.body", "body": b"done", "more_body": not complete})
        answered.set()
        if linger:
            await asyncio.sleep(3600)

    return app


class SlowStore(MemoryStore):
    """Completes after a wait of its own, as a network store does: the completion is awaited
    in the task the server cancelled."""

    async def acomplete(self, ticket: Any, result: bytes, codec: str, ttl: float | None) -> Any:
        await asyncio.sleep(0.01)
        return self.complete(ticket, result, codec, ttl)


async def _cancelled_then_retried(
    complete: bool, store: MemoryStore
) -> tuple[list[int], Got, list[Message]]:
    runs: list[int] = []
    answered = asyncio.Event()
    guarded: Any = middleware(_app(runs, answered, complete), store)
    sent: list[Message] = []

    async def receive() -> Message:
        return request(b"{}")

    async def send(message: Message) -> None:
        sent.append(message)

    task = asyncio.create_task(guarded(_scope(), receive, send))
    await answered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task  # the cancellation still reaches the server
    retry_runs: list[int] = []
    retried = middleware(_app(retry_runs, asyncio.Event(), True, linger=False), store)
    got = await asyncio.wait_for(_call(retried), 5)
    runs += retry_runs
    return runs, got, sent


async def _call(app: Any) -> Got:
    sent: list[Message] = []

    async def receive() -> Message:
        return request(b"{}")

    async def send(message: Message) -> None:
        sent.append(message)

    await app(_scope(), receive, send)
    return Got(sent)


@pytest.mark.parametrize("store", [MemoryStore, SlowStore])
def test_a_request_cancelled_after_its_complete_answer_is_stored_and_replayed(
    store: type[MemoryStore],
) -> None:
    runs, got, sent = asyncio.run(_cancelled_then_retried(True, store()))
    first = Got(sent)  # sent before the cancellation was raised
    assert first.status == 201
    assert first.body == b"done"
    assert runs == [1]  # the retry replays, it does not run the body again
    assert got.status == 201
    assert got.body == b"done"
    assert got.headers["idempotent-replayed"] == "true"


def test_a_request_cancelled_before_its_answer_is_complete_releases_its_key() -> None:
    runs, got, sent = asyncio.run(_cancelled_then_retried(False, MemoryStore()))
    assert sent == []  # nothing of a half answer went out
    assert runs == [1, 1]  # released: the retry runs, as after any failure of the app
    assert got.status == 201
    assert "idempotent-replayed" not in got.headers
