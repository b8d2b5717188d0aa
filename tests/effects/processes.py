"""Payment processes for the crash tests, and the backends they run on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

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
