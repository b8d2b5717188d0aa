"""What each part of an ASGI first request costs in place, counted by leaving it out.

    .venv/bin/python bench/http_parts.py [--calls 500] [PART ...]

bench_http_python.py's "asgi first" (the FastAPI endpoint of bench_http.py behind mideng's
middleware on the memory store), run under callgrind once as it is and once per part made
trivial; the difference is what that part executes inside a real request, its calls into the
rest included. Counting a part alone in a loop misses how it runs in the request (the Guard
alone pays its own fingerprint and arun; inside the middleware it pays neither). Parts:

- ``bare``: no middleware (the bare endpoint);
- ``fingerprint``: the request's fingerprint (``http_digest``) is a constant;
- ``guard``: no Guard and no store: the body run as the Guard would, its result replied as a
  first run's;
- ``stored form``: a response's record bytes are a constant (mideng.http.stored writes none);
- ``request id``: the middleware's ``request_id=False``.

Not for the docs' figures of a whole request (bench_http_python.py is): the parts left out
change the requests, which no longer do what a client would be sent.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import uuid
from pathlib import Path
from typing import Any

from callgrind import instructions_per_call

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PARTS = ("whole", "bare", "fingerprint", "guard", "stored form", "request id")


class _Call:
    """What the ``guard`` part's ``Guard.prepare`` makes: a call that takes its fingerprint."""

    fingerprint: str | None = None


def child(part: str, calls: int) -> None:
    logging.getLogger("mideng").setLevel(logging.ERROR)
    import bench_http
    from mideng import Guard
    from mideng.http import asgi, stored
    from mideng.stores.memory import MemoryStore

    if part == "fingerprint":
        setattr(asgi, "http_digest", lambda *fields: "h2:" + "f" * 64)  # noqa: B010 (its name there)
    elif part == "guard":

        async def adrive(self: Any, call: Any, fn: Any, args: Any, kwargs: Any) -> Any:
            return await fn(*args, **kwargs)  # the body alone: no claim, no completion

        Guard.prepare = lambda self, *args: _Call()  # type: ignore[method-assign,assignment]
        Guard.adrive = adrive  # type: ignore[method-assign]
    elif part == "stored form":
        stored.ResponseCodec.encode = lambda self, value: b"{}"  # type: ignore[method-assign]
    app = bench_http.endpoint_app()
    if part != "bare":
        app.add_middleware(
            asgi.IdempotencyMiddleware, guard=Guard(MemoryStore()), request_id=part != "request id"
        )
    run = uuid.uuid4().hex[:8]
    batch = bench_http.requests(app, lambda n: f'"{run}-{n}"'.encode())

    async def requests() -> None:
        await batch(list(range(calls)))

    asyncio.run(requests())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("parts", nargs="*", help=f"of {', '.join(PARTS)} (default: all)")
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--child", nargs=2, metavar=("PART", "CALLS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    parts = args.parts or list(PARTS)
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown parts {unknown}; choose from {list(PARTS)}")
    got = {p: instructions_per_call(__file__, p, args.calls, 200) for p in parts}
    print("| part left out | thousand instructions / request | the part, in place |")
    print("|---|---:|---:|")
    whole = got.get("whole")
    for part, n in got.items():
        saved = "" if whole is None or part == "whole" else f"{(whole - n) / 1000:.1f}"
        print(f"| {part} | {n / 1000:.1f} | {saved} |")


if __name__ == "__main__":
    main()
