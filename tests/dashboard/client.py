"""A blocking client of an ASGI app for the dashboard's tests: httpx over ASGITransport,
on an event loop of its own (Starlette's TestClient asks for another package)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx


class Client:
    def __init__(self, app: Any, base_url: str = "http://127.0.0.1") -> None:
        self.app = app
        self.loop = asyncio.new_event_loop()
        transport = httpx.ASGITransport(app=app)
        self.http = httpx.AsyncClient(transport=transport, base_url=base_url)

    def run(self, work: Any) -> Any:
        return self.loop.run_until_complete(work)

    def request(self, method: str, path: str, **options: Any) -> httpx.Response:
        reply: httpx.Response = self.run(self.http.request(method, path, **options))
        return reply

    def get(self, path: str, **options: Any) -> httpx.Response:
        return self.request("GET", path, **options)

    def post(self, path: str, **options: Any) -> httpx.Response:
        return self.request("POST", path, **options)

    def close(self) -> None:
        self.run(self.http.aclose())
        closing = getattr(self.app, "aclose", None)
        if closing is not None:  # the dashboard's async engine, on the loop that opened it
            self.run(closing())
        self.loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
