"""Where an ASGI request's time goes, function by function, with a sampling profiler (py-spy):
which part is the layer's own code and which is FastAPI's own code running slower beside it.

    .venv/bin/pip install py-spy
    for c in bare mideng; do .venv/bin/py-spy record -r 1000 -f raw -o $c.txt -- \
        .venv/bin/python bench/http_profile.py run $c 20; done
    .venv/bin/python bench/http_profile.py compare bare.txt US mideng.txt US

``run CASE SECONDS`` sends first requests (a new key each) to one case for that long after a
warm-up and prints the µs a request it measured under the profiler (the US to pass to
``compare``). Cases: ``bare`` (the FastAPI endpoint), ``mideng`` and ``minimal`` (mideng's
middleware on the memory store, or bench/http_floor.py's hand-written minimal layer, in front
of it), ``around`` (mideng's middleware around the raw ASGI application).

``compare A US_A B US_B`` turns each profile's samples into µs a request (a function's share
of the samples taken inside a request, times that run's µs a request) and prints, per
function, A, B and the difference, then the sums by origin: the framework (FastAPI, Starlette,
pydantic and the standard library they call), the layer (mideng, the floor) and the rest.
The profiler slows everything alike, so compare the shares, not the absolute µs.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_http import call, endpoint_app
from http_floor import MinimalIdempotency, raw_app

FRAMEWORK = ("fastapi/", "starlette/", "pydantic", "anyio", "contextlib", "typing", "<frozen")
LAYER = ("mideng/", "(memory.py", "http_floor.py")


def app_of(case: str) -> tuple[Any, bool]:
    """The ASGI application of a case, and whether its requests carry a key."""
    from mideng import Guard
    from mideng.http.asgi import IdempotencyMiddleware
    from mideng.stores.memory import MemoryStore

    if case == "bare":
        return endpoint_app(), False
    if case == "around":
        return IdempotencyMiddleware(raw_app, guard=Guard(MemoryStore())), True
    app = endpoint_app()
    if case == "mideng":
        app.add_middleware(IdempotencyMiddleware, guard=Guard(MemoryStore()))
    elif case == "minimal":
        app.add_middleware(MinimalIdempotency)
    else:
        raise SystemExit(f"unknown case {case!r}: bare, mideng, minimal, around")
    return app, True


async def run(case: str, seconds: float) -> None:
    logging.getLogger("mideng").setLevel(logging.ERROR)
    app, keyed = app_of(case)
    prefix = uuid.uuid4().hex[:8]
    sent = 0

    async def one() -> None:
        nonlocal sent
        sent += 1
        await call(app, f'"{prefix}-{sent}"'.encode() if keyed else None)

    for _ in range(2000):  # warm-up: caches, specialised bytecode, the first records
        await one()
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for _ in range(200):
            await one()
        count += 200
    print(f"{case}: {(time.perf_counter() - started) / count * 1e6:.1f} µs a request")


def per_request(path: str, us: float) -> Counter[str]:
    """A py-spy raw profile as µs a request per function (samples inside a request only)."""
    samples: Counter[str] = Counter()
    total = 0
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        stack, _, count = line.rpartition(" ")
        if "call (bench_http.py" not in stack:
            continue
        total += int(count)
        leaf = stack.rsplit(";", 1)[-1]
        samples[leaf.rsplit(":", 1)[0] if leaf else "?"] += int(count)
    return Counter({name: n / total * us for name, n in samples.items()})


def origin(name: str) -> str:
    if any(part in name for part in LAYER):
        return "layer"
    return "framework" if any(part in name for part in FRAMEWORK) else "rest"


def compare(a: str, us_a: float, b: str, us_b: float) -> None:
    first, second = per_request(a, us_a), per_request(b, us_b)
    rows = sorted(first.keys() | second.keys(), key=lambda n: second[n] - first[n], reverse=True)
    print(f"{'A µs':>8} {'B µs':>8} {'B - A':>8}  function")
    for name in rows[:40]:
        print(f"{first[name]:8.2f} {second[name]:8.2f} {second[name] - first[name]:+8.2f}  {name}")
    for label, profile in (("A", first), ("B", second)):
        sums: Counter[str] = Counter()
        for name, us in profile.items():
            sums[origin(name)] += us
        print(
            label,
            ", ".join(f"{kind} {sums[kind]:.1f} µs" for kind in ("framework", "layer", "rest")),
        )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "run":
        asyncio.run(run(sys.argv[2], float(sys.argv[3])))
    elif len(sys.argv) == 6 and sys.argv[1] == "compare":
        compare(sys.argv[2], float(sys.argv[3]), sys.argv[4], float(sys.argv[5]))
    else:
        raise SystemExit(__doc__)
