"""Payment processes for the crash tests, and the backends they run on."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mideng.errors import StoreUnavailableError
from tests.backends import Ctx, Opened, by_name
from tests.services import need

PAYMENT = Path(__file__).with_name("payment.py")
LEASE = 0.6


def open_backend(name: str, ctx: Ctx) -> Iterator[Opened]:
    backend = by_name(name)
    if backend.service is not None:
        need(backend.service)
    opened = backend.make(ctx)
    yield opened
    opened.store.close()


def failing_once(store: Any, name: str) -> list[int]:
    """Make ``store.<name>`` (sync or async) raise StoreUnavailableError on its next call
    only; the calls it sees are counted in the list returned."""
    calls: list[int] = []
    real = getattr(store, name)

    if asyncio.iscoroutinefunction(real):

        async def aonce(*args: Any) -> Any:
            calls.append(1)
            if len(calls) == 1:
                raise StoreUnavailableError(f"{name} failed once")
            return await real(*args)

        setattr(store, name, aonce)
    else:

        def once(*args: Any) -> Any:
            calls.append(1)
            if len(calls) == 1:
                raise StoreUnavailableError(f"{name} failed once")
            return real(*args)

        setattr(store, name, once)
    return calls


def start(
    opened: Opened, work: Path, what: str, orders: list[str], **env: str
) -> subprocess.Popen[bytes]:
    assert opened.url is not None
    return subprocess.Popen(
        [
            sys.executable,
            str(PAYMENT),
            opened.url,
            json.dumps(opened.options),
            str(work),
            str(LEASE),
            what,
            *orders,
        ],
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **env),
    )


def until(condition: Callable[[], bool], seconds: float = 30) -> None:
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.02)
