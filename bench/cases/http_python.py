"""Instructions per HTTP request: the middlewares against their bare applications, counted.

    .venv/bin/python -m bench http-python [--calls 2000] [--cases NAME ...] [--stores]

Timed ratios (the http case) move with the machine's load, and over a network store with how the
OS schedules client and server; instruction counts do neither. Each case runs in a child
process under ``valgrind --tool=callgrind`` twice, with 300 and 300 + ``--calls`` requests; the
difference divided by ``--calls`` is what one request executes in this process, interpreter,
framework and store client included (a server's own work is not in it).

Cases: the bare FastAPI endpoint of the http case and mideng's ASGI middleware in front of it
on the memory store (first request, replay); the Guard alone on the memory store with a body
that returns the same response's stored form, as the middleware's does (what the middleware
cannot shed: the Guard's first call and duplicate); a bare WSGI application and the WSGI
middleware in front of it; a bare Django view and the Django middleware. ``--stores`` adds
the ASGI middleware on Redis and PostgreSQL and each store's own calls (the http case's
"store's own cost" rows), so what the middleware adds over its store is counted per store.
"""

from __future__ import annotations

import asyncio
import logging
import platform
import sys
import uuid
from collections.abc import Callable
from typing import Any

from bench import stores, web
from bench.callgrind import child_call, instructions_per_call, need_valgrind
from bench.report import RESULTS, command, parser, write
from bench.services import POSTGRES_URL, REDIS_URL

BASE = 300
ASGI = ("asgi bare", "asgi first", "asgi replay", "guard first", "guard replay")
WSGI = ("wsgi bare", "wsgi first", "wsgi replay")
DJANGO = ("django bare", "django first", "django replay")
STORES = tuple(
    f"{store} {case}"
    for store in ("redis", "postgresql")
    for case in ("asgi first", "asgi replay", "own first", "own replay")
)


def asgi_child(case: str, calls: int) -> None:
    from mideng import Guard
    from mideng.http.core import StoredResponse
    from mideng.http.exchange import stored_form
    from mideng.stores.memory import MemoryStore

    head, _, rest = case.partition(" ")
    where, kind = (head, rest) if head in ("redis", "postgresql") else ("", case)
    cleanup: Callable[[], None] = lambda: None  # noqa: E731
    store: Any = MemoryStore()
    if where:
        opened = (
            stores.redis_store(REDIS_URL)
            if where == "redis"
            else stores.postgresql_store(POSTGRES_URL)
        )
        if opened is None:
            raise SystemExit(f"{case}: no {where} server")
        store, cleanup = opened
    if kind == "asgi bare":
        batch = web.requests(web.endpoint_app(), lambda n: None)
    elif kind in ("asgi first", "asgi replay"):
        first, replay = web.middleware_cases(web.mideng_app(store), case)
        batch = (first if kind == "asgi first" else replay)[1]
    elif kind in ("own first", "own replay"):
        first, _, replay = web.store_cases(store, case)
        batch = (first if kind == "own first" else replay)[1]
    else:  # the Guard alone, a body returning what the endpoint's response is stored as
        guard, run = Guard(store), uuid.uuid4().hex[:8]
        answer = stored_form(
            StoredResponse(201, (("content-type", "application/json"),), web.ANSWER)
        )

        async def body() -> Any:  # as the middleware's: a replay gets the decoded JSON
            return answer

        async def guarded(numbers: list[int]) -> None:
            for n in numbers:
                key = f"{run}-{n}" if kind == "guard first" else "replay"
                await guard.arun("http:-", key, body, payload={"body": "same"})

        batch = guarded

    async def requests() -> None:
        await batch(list(range(calls)))

    try:
        asyncio.run(requests())
    finally:
        cleanup()


def wsgi_child(case: str, calls: int) -> None:
    from mideng import Guard
    from mideng.http.wsgi import IdempotencyMiddleware
    from mideng.stores.memory import MemoryStore

    app: Any = web.wsgi_app
    if case != "wsgi bare":
        app = IdempotencyMiddleware(web.wsgi_app, guard=Guard(MemoryStore()))
    run = uuid.uuid4().hex[:8]
    for n in range(calls):
        environ = web.wsgi_environ()
        if case != "wsgi bare":
            environ["HTTP_IDEMPOTENCY_KEY"] = f'"{run}-{n}"' if case == "wsgi first" else '"r"'
        started: list[str] = []

        def start_response(status: str, headers: Any, exc_info: Any = None) -> Any:
            started.append(status)  # noqa: B023 (called before the next round binds it)

        body = b"".join(app(environ, start_response))
        assert started[0].startswith("201"), started
        assert body == web.ANSWER, body


def django_child(case: str, calls: int) -> None:
    import django
    from django.conf import settings

    from bench import django_site

    settings.configure(**django_site.settings(guarded=case != "django bare"))
    django.setup()
    from django.test import RequestFactory
    from django.test.client import ClientHandler

    handler = ClientHandler(enforce_csrf_checks=False)
    factory = RequestFactory()
    run = uuid.uuid4().hex[:8]
    for n in range(calls):
        key = f'"{run}-{n}"' if case == "django first" else '"r"'
        headers = {} if case == "django bare" else {"Idempotency-Key": key}
        request = factory.post(
            "/orders", web.BODY, content_type="application/json", headers=headers
        )
        response = handler(request.environ)
        assert response.status_code == 201, response


def child(case: str, calls: int) -> None:
    logging.getLogger("mideng").setLevel(logging.ERROR)
    if case.startswith("wsgi"):
        wsgi_child(case, calls)
    elif case.startswith("django"):
        django_child(case, calls)
    else:
        asgi_child(case, calls)


def main(argv: list[str]) -> None:
    options = parser("http-python", __doc__)
    options.add_argument("--calls", type=int, default=2000)
    options.add_argument("--cases", nargs="*", help="only these cases")
    options.add_argument("--stores", action="store_true", help="Redis and PostgreSQL cases too")
    options.add_argument("--out", default=str(RESULTS / "http_python.md"))
    args = options.parse_args(argv)
    need_valgrind("http-python")
    cases = args.cases or [*ASGI, *WSGI, *DJANGO, *(STORES if args.stores else ())]
    got = {case: instructions_per_call(__spec__.name, case, args.calls, BASE) for case in cases}
    lines = ["| case | thousand instructions / request |", "|---|---:|"]
    lines += [f"| {case} | {n / 1000:.1f} |" for case, n in got.items()]
    derived = []
    for app in ("asgi", "wsgi", "django"):
        bare = got.get(f"{app} bare")
        for kind in ("first", "replay"):
            ours = got.get(f"{app} {kind}")
            if bare is not None and ours is not None:
                derived.append(f"| {app} {kind} | {ours / bare:.2f} |")
    if derived:
        lines += ["", "| middleware | x its bare application |", "|---|---:|", *derived]
    over = []
    for store in ("redis", "postgresql"):
        if all(f"{store} {k}" in got for k in ("asgi first", "own first")) and "asgi bare" in got:
            first = got[f"{store} asgi first"] - got["asgi bare"] - got[f"{store} own first"]
            replay = got[f"{store} asgi replay"] - got[f"{store} own replay"]
            over.append(f"| {store} | {first / 1000:.1f} | {replay / 1000:.1f} |")
    if over:
        lines += [
            "",
            "| store | ASGI middleware over its store, first (thousand) | replay |",
            "|---|---:|---:|",
            *over,
        ]
    text = "\n".join(
        [
            "# HTTP middleware (instructions per request)",
            "",
            f"Command: `{command('http-python', _shown(argv))}`",
            "",
            f"Python {platform.python_version()}, {platform.machine()}, valgrind callgrind; "
            f"{args.calls} requests after {BASE}.",
            "",
            *lines,
        ]
    )
    print(text)
    if not args.cases:
        write(args.out, text)


def _shown(argv: list[str]) -> list[str]:
    """The command's arguments without ``--out`` and its value, in either spelling."""
    shown, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--out":
            skip = True
        elif not arg.startswith("--out="):
            shown.append(arg)
    return shown


if __name__ == "__main__":  # the child instructions_per_call counts
    child(*child_call(sys.argv[1:]))
