"""What each part of an ASGI first request costs in place, counted (or timed) by leaving it out.

    .venv/bin/python bench/http_parts.py [--calls 500] [PART ...]
    .venv/bin/python bench/http_parts.py --timed [--rounds 15] [--calls 500] [PART ...]

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
- ``request id``: the middleware's ``request_id=False``;
- ``pass``: no middleware, but an ASGI layer that only awaits the application (what being a
  layer costs);
- ``capture``: no middleware, but a layer that reads the body, hands it to the application
  and holds the response back until it is complete, then sends it (what holding a response
  back costs, without idempotency);
- ``guard alone``: no request at all, the Guard's async first call on the memory store in a
  loop, its body returning the endpoint's response's stored form (bench_http_python.py's
  "guard first"): what the Guard costs with the caches to itself.

``--timed``: each part in a child process of its own (the parts patch the code), timed against
the bare endpoint in the same child, interleaved (``--rounds`` of ``--calls`` requests each,
medians): instruction counts weigh a C call (the fingerprint's scanner, encoder and SHA-256)
as much as the same number of the interpreter's, which they do not cost.

Not for the docs' figures of a whole request (bench_http_python.py is): the parts left out
change the requests, which no longer do what a client would be sent.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import platform
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from callgrind import instructions_per_call

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PARTS = (
    "whole",
    "bare",
    "fingerprint",
    "guard",
    "stored form",
    "request id",
    "pass",
    "capture",
    "guard alone",
)
LAYERS = ("pass", "capture", "guard alone")


class _Call:
    """What the ``guard`` part's ``Guard.prepare`` makes: a call that takes its fingerprint."""

    fingerprint: str | None = None


class _Pass:
    """An ASGI layer that only awaits the application."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


class _Capture(_Pass):
    """A layer that reads the body, replays it to the application and sends the response once
    it is complete: what any storing middleware does, without idempotency."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = (await receive()).get("body", b"")
        held: list[Any] = []

        async def replay() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def hold(message: Any) -> None:
            held.append(message)

        await self.app(scope, replay, hold)
        for message in held:
            await send(message)


def part_batch(part: str) -> Any:
    """The first requests' batch with ``part`` left out (patching the code for it)."""
    logging.getLogger("mideng").setLevel(logging.ERROR)
    import bench_http
    from mideng import Guard
    from mideng.http import asgi, core, stored
    from mideng.stores.memory import MemoryStore

    if part == "fingerprint":
        setattr(core, "http_digest", lambda *fields: "h2:" + "f" * 64)  # noqa: B010 (its name there)
    elif part == "guard":

        async def adrive(
            self: Any, call: Any, fn: Any, args: Any, kwargs: Any, terms: Any = None
        ) -> Any:
            return await fn(*args, **kwargs)  # the body alone: no claim, no completion

        Guard.prepare = lambda self, *args: _Call()  # type: ignore[method-assign,assignment]
        Guard.adrive = adrive  # type: ignore[method-assign]
    elif part == "stored form":
        stored.ResponseCodec.encode = lambda self, value: b"{}"  # type: ignore[method-assign]
    elif part == "guard alone":
        return _guard_alone()
    app = bench_http.endpoint_app()
    if part in LAYERS:
        app.add_middleware(_Pass if part == "pass" else _Capture)
    elif part != "bare":
        app.add_middleware(
            asgi.IdempotencyMiddleware, guard=Guard(MemoryStore()), request_id=part != "request id"
        )
    run = uuid.uuid4().hex[:8]
    return bench_http.requests(app, lambda n: f'"{run}-{n}"'.encode())


def _guard_alone() -> Any:
    from mideng import Guard
    from mideng.http.core import StoredResponse
    from mideng.http.exchange import stored_form
    from mideng.stores.memory import MemoryStore

    guard, run = Guard(MemoryStore()), uuid.uuid4().hex[:8]
    answer = stored_form(
        StoredResponse(201, (("content-type", "application/json"),), b'{"order":"o-1"}')
    )

    async def body() -> Any:
        return answer

    async def batch(numbers: list[int]) -> None:
        for n in numbers:
            await guard.arun("http:-", f"{run}-{n}", body, payload={"body": "same"})

    return batch


def child(part: str, calls: int) -> None:
    batch = part_batch(part)

    async def requests() -> None:
        await batch(list(range(calls)))

    asyncio.run(requests())


def timed_child(part: str, calls: int, rounds: int) -> None:
    """Print ``<bare µs> <part µs>``: medians of ``rounds`` interleaved batches of each."""
    import bench_http

    batch = part_batch(part)
    cases = [("bare", bench_http.requests(bench_http.endpoint_app(), lambda n: None))]
    got = asyncio.run(bench_http.measure([*cases, (part, batch)], calls, rounds))
    print(f"{got['bare']} {got[part]}")


def timed(parts: list[str], calls: int, rounds: int) -> None:
    print(
        f"Python {platform.python_version()}; {rounds} interleaved rounds of {calls} requests"
        f" per case in each part's own process, medians; load average"
        f" {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs"
    )
    print()
    # Each child's machine speed differs (its placement, the host's load), so a part is read
    # as a ratio to the bare endpoint timed beside it, not in µs across children.
    print("| part left out | bare endpoint µs | request µs | x bare | the part in place, x bare |")
    print("|---|---:|---:|---:|---:|")
    ratios: dict[str, float] = {}
    for part in parts:
        done = subprocess.run(
            [sys.executable, __file__, "--timed-child", part, str(calls), str(rounds)],
            capture_output=True,
            text=True,
            check=True,
        )
        bare, request = map(float, done.stdout.split())
        ratios[part] = request / bare
        in_place = "" if part in ("whole", *LAYERS) else f"{ratios['whole'] - ratios[part]:.3f}"
        print(f"| {part} | {bare:.1f} | {request:.1f} | {ratios[part]:.3f} | {in_place} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("parts", nargs="*", help=f"of {', '.join(PARTS)} (default: all)")
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--timed", action="store_true", help="time the parts, do not count")
    parser.add_argument("--rounds", type=int, default=15, help="with --timed")
    parser.add_argument("--child", nargs=2, metavar=("PART", "CALLS"), help=argparse.SUPPRESS)
    parser.add_argument("--timed-child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    if args.timed_child:
        part, calls, rounds = args.timed_child
        timed_child(part, int(calls), int(rounds))
        return
    parts = args.parts or list(PARTS)
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        parser.error(f"unknown parts {unknown}; choose from {list(PARTS)}")
    if args.timed:
        timed(["whole", *[p for p in parts if p not in ("whole", "bare")]], args.calls, args.rounds)
        return
    got = {p: instructions_per_call(__file__, p, args.calls, 200) for p in parts}
    print("| part left out | thousand instructions / request | the part, in place |")
    print("|---|---:|---:|")
    whole = got.get("whole")
    for part, n in got.items():
        saved = "" if whole is None or part == "whole" else f"{(whole - n) / 1000:.1f}"
        print(f"| {part} | {n / 1000:.1f} | {saved} |")


if __name__ == "__main__":
    main()
