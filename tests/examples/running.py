"""What the example projects' tests share: waiting for a condition a child process makes
true, whether a child handles SIGTERM yet, and a free port for a web process."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def handles_sigterm(process: subprocess.Popen[Any]) -> bool:
    """The process has exited, or has a handler for SIGTERM (its status's SigCgt mask): a
    process still starting would just die of it."""
    if process.poll() is not None:
        return True
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False
