"""Driving the ASGI middleware by hand: a scope, the messages a client sends, what it got,
and small apps that count their runs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from mideng import Guard
from mideng.http import asgi
from mideng.stores.memory import MemoryStore

Raw = list[tuple[bytes, bytes]]
Message = dict[str, Any]
KEY: Raw = [(b"idempotency-key", b'"k"')]


def request(body: bytes = b"", more: bool = False) -> Message:
    return {"type": "http.request", "body": body, "more_body": more}


DISCONNECT: Message = {"type": "http.disconnect"}


class Got:
    """What the client saw: the status (None: nothing sent), headers and body."""

    def __init__(self, sent: list[Message]) -> None:
        start = next((m for m in sent if m["type"] == "http.response.start"), None)
        self.status: int | None = None if start is None else start["status"]
        self.headers = {
            bytes(k).decode("latin-1"): bytes(v).decode("latin-1")
            for k, v in ([] if start is None else start["headers"])
        }
        self.body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")

    def problem(self) -> str:
        assert self.headers["content-type"] == "application/problem+json", self.body
        doc = json.loads(self.body)
        assert doc["status"] == self.status
        return str(doc["type"]).rpartition(":")[2]


async def call(
    app: Any,
    headers: Any = KEY,
    body: bytes = b"{}",
    messages: list[Message] | None = None,
    method: str = "POST",
) -> Got:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "path": "/x",
        "raw_path": b"/x",
        "query_string": b"",
        "headers": headers,
    }
    queue = list(messages) if messages is not None else [request(body)]
    sent: list[Message] = []

    async def receive() -> Message:
        if queue:
            return queue.pop(0)
        await asyncio.sleep(3600)  # a client that sent everything and waits
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return Got(sent)


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


App = Callable[[Any, Any, Any], Awaitable[None]]


def counting(
    runs: list[int],
    status: int = 201,
    *,
    size: int = 2,
    parts: int = 1,
    content_type: bytes = b"text/plain",
) -> App:
    """An app that reads its body and answers ``parts`` chunks of ``size`` bytes."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        runs.append(1)
        while (await receive()).get("more_body", False):
            pass
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", content_type)],
            }
        )
        for i in range(parts):
            await send(
                {"type": "http.response.body", "body": b"x" * size, "more_body": i < parts - 1}
            )

    return app


def middleware(app: App, store: Any = None, **options: Any) -> asgi.IdempotencyMiddleware:
    return asgi.IdempotencyMiddleware(app, guard=Guard(store or MemoryStore()), **options)
