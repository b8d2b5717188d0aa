"""A blocking client of an ASGI app for the dashboard's tests: httpx over ASGITransport,
on an event loop of its own (Starlette's TestClient asks for another package)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx


class Client:
    def __init__(self, app: Any, base_url: str = "http://127.0.0.1") -> None:
        self.app = app
        self.runner = asyncio.Runner()
        transport = httpx.ASGITransport(app=app)
        self.http = httpx.AsyncClient(transport=transport, base_url=base_url)

    def request(self, method: str, path: str, **options: Any) -> httpx.Response:
        return self.runner.run(self.http.request(method, path, **options))

    def get(self, path: str, **options: Any) -> httpx.Response:
        return self.request("GET", path, **options)

    def post(self, path: str, **options: Any) -> httpx.Response:
        return self.request("POST", path, **options)

    def close(self) -> None:
        self.runner.run(self.http.aclose())
        closing = getattr(self.app, "aclose", None)
        if closing is not None:  # the dashboard's async engine, on the loop that opened it
            self.runner.run(closing())
        self.runner.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
