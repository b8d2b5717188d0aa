"""The http case's WSGI and Django rows: each middleware against its own bare application.

The WSGI application and the Django view are the http-python case's too (bench.web,
bench.django_site), driven in-process as a WSGI server would: an environ per request,
``start_response``, the body joined. Django's handler is its WSGIHandler, built once with no
middleware (the bare view) and once with mideng's; both serve the same URL patterns. The
guarded rows run on the memory store.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable
from typing import Any

from bench.timing import Batch
from bench.web import ANSWER, wsgi_app, wsgi_environ

KeyOf = Callable[[int], "str | None"]


def environ_of(key: str | None) -> dict[str, Any]:
    environ = wsgi_environ()
    environ["wsgi.errors"] = io.StringIO()
    environ["wsgi.multithread"] = False
    environ["wsgi.multiprocess"] = False
    environ["wsgi.run_once"] = False
    if key is not None:
        environ["HTTP_IDEMPOTENCY_KEY"] = key
    return environ


def wsgi_requests(app: Any, key_of: KeyOf) -> Batch:
    """A batch of POSTs through ``app``; the WSGI rows are synchronous, run inside the loop."""
    started: list[str] = []

    def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
        started.append(status)

    async def batch(numbers: list[int]) -> None:
        for n in numbers:
            started.clear()
            result = app(environ_of(key_of(n)), start_response)
            body = b"".join(result)
            close = getattr(result, "close", None)
            if close is not None:
                close()
        assert started[0].startswith("201"), started
        assert body == ANSWER, body

    return batch


def keyed(label: str, app: Any) -> tuple[tuple[str, Batch], tuple[str, Batch]]:
    run = uuid.uuid4().hex[:8]
    replay = f'"replay-{run}"'
    return (
        (f"{label}, first request", wsgi_requests(app, lambda n: f'"{run}-{n}"')),
        (f"{label}, replay", wsgi_requests(app, lambda n: replay)),
    )


def wsgi_cases() -> list[tuple[str, Batch]]:
    from mideng import Guard
    from mideng.http.wsgi import IdempotencyMiddleware
    from mideng.stores.memory import MemoryStore

    guarded = IdempotencyMiddleware(wsgi_app, guard=Guard(MemoryStore()))
    bare = ("WSGI bare application", wsgi_requests(wsgi_app, lambda n: None))
    return [bare, *keyed("WSGI mideng + memory store", guarded)]


def django_cases() -> list[tuple[str, Batch]]:
    """Django's two handlers; settings are the process's, configured here once."""
    import django
    from django.conf import settings
    from django.core.handlers.wsgi import WSGIHandler

    from bench import django_site

    settings.configure(**django_site.settings(guarded=False))
    django.setup()
    bare = WSGIHandler()  # loads its middleware now: none
    settings.MIDDLEWARE = django_site.settings(guarded=True)["MIDDLEWARE"]
    guarded = WSGIHandler()
    return [
        ("Django bare view", wsgi_requests(bare, lambda n: None)),
        *keyed("Django mideng + memory store", guarded),
    ]
