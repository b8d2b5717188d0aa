"""The test application served for real: FastAPI under uvicorn or Flask under waitress."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from mideng import Guard
from mideng.http import asgi, wsgi
from mideng.http.core import Route
from tests.http.http_apps import (
    FlakyStore,
    Recorder,
    counting_asgi,
    counting_wsgi,
    fastapi_app,
    flask_app,
    tenant_of,
)
from tests.http.http_servers import uvicorn_server, waitress_server

FRAMEWORKS = ["fastapi", "flask"]

#: The options every served test app runs with.
OPTIONS: dict[str, Any] = {
    "principal": tenant_of,
    "max_body": 1024,
    "max_response": 4096,
    "fingerprint_headers": ["x-variant"],
    "routes": [Route("/any", methods=["POST", "PATCH", "PUT", "DELETE"], required=True)],
}


@dataclass
class Served:
    kind: str
    url: str
    rec: Recorder
    store: FlakyStore
    guard: Guard


@contextlib.contextmanager
def serve(kind: str, **options: Any) -> Iterator[Served]:
    rec = Recorder()
    store = FlakyStore()
    guard = Guard(store, lease=30.0)
    merged = {**OPTIONS, **options}
    if kind == "fastapi":
        app = fastapi_app(rec)
        app.add_middleware(asgi.IdempotencyMiddleware, guard=guard, **merged)
        with uvicorn_server(counting_asgi(app, rec)) as url:
            yield Served(kind, url, rec, store, guard)
    else:
        wrapped = wsgi.IdempotencyMiddleware(flask_app(rec), guard=guard, **merged)
        with waitress_server(counting_wsgi(wrapped, rec)) as url:
            yield Served(kind, url, rec, store, guard)
