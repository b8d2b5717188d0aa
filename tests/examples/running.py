"""What the example projects' tests share: waiting for a condition a child process makes
true, and a free port for a web process."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

WAIT = 20.0  # seconds any one condition may take before the test fails


def until(what: str, done: Callable[[], bool]) -> None:
    """Return once ``done()``; polls a condition the test cannot be told of, orders no race."""
    deadline = time.monotonic() + WAIT
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting for {what}")
        time.sleep(0.05)


def spare_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
