"""HTTP responses counted by status class and replay, through the WSGI integration."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry

from mideng import Guard, open_store
from mideng.http.wsgi import IdempotencyMiddleware
from tests.observability.scrape import series


def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
    status = "402 Payment Required" if environ["PATH_INFO"] == "/declined" else "201 Created"
    start_response(status, [("content-type", "application/json")])
    return [b'{"order": "o-1"}']


def post(wsgi: Any, path: str, key: str) -> str:
    got: list[str] = []
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "HTTP_IDEMPOTENCY_KEY": key,
        "CONTENT_LENGTH": "2",
        "wsgi.input": __import__("io").BytesIO(b"{}"),
        "SERVER_NAME": "shop",
        "SERVER_PORT": "80",
        "wsgi.url_scheme": "http",
    }
    b"".join(wsgi(environ, lambda status, headers, *a: got.append(status)))
    return got[0]


def test_responses_by_status_class_and_replay(registry: CollectorRegistry) -> None:
    wsgi = IdempotencyMiddleware(app, Guard(open_store("memory://")))
    assert post(wsgi, "/orders", "k-1").startswith("201")
    assert post(wsgi, "/orders", "k-1").startswith("201")  # the replay
    assert post(wsgi, "/orders", "k-1").startswith("201")
    assert post(wsgi, "/declined", "k-2").startswith("402")
    assert series(registry, "mideng_http_responses_total") == {
        (("replayed", "false"), ("status_class", "2xx")): 1,
        (("replayed", "true"), ("status_class", "2xx")): 2,
        (("replayed", "false"), ("status_class", "4xx")): 1,
    }
