"""The running event loop and this process's id, found without the system calls asyncio and
``os.getpid()`` make for them.

CPython's ``asyncio.get_running_loop()`` (3.11) checks the loop it finds against ``getpid()``
on every call, so that a child forked while a loop ran does not take its parent's loop for its
own. ``getpid()`` is a system call (glibc keeps no copy), about a microsecond on a virtual
machine with its mitigations, and the kernel's entry and exit cool the caches the Python
around it then runs in; every async guarded call asked for the loop at least once.

``running_loop()`` asks asyncio once per loop and thread. A loop runs in one thread at a time
and a thread runs one loop at a time; ``BaseEventLoop`` keeps the id of the thread running it
(``_thread_id``, set by ``run_forever`` for exactly as long as it runs). So the loop asked for
last is this thread's running loop exactly when its ``_thread_id`` is this thread's. A child
forked meanwhile forgets it (the fork hook), and asks asyncio again, which refuses it the
parent's loop as before. A loop of another kind (uvloop's) is asked for through asyncio every
time.

``Process.pid`` is this process's id, kept by a fork hook: the stores check for a fork on every
operation (a child must open connections of its own), and ``os.getpid()`` asked each time
would be that system call again.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_get_ident = threading.get_ident
_get_running_loop = asyncio.get_running_loop
_BASE = asyncio.BaseEventLoop

# The loop asked for last, when it is a BaseEventLoop. Read once per call: threads running
# loops of their own replace it in between, which the thread check sees.
_LAST: list[asyncio.BaseEventLoop | None] = [None]


def running_loop() -> asyncio.AbstractEventLoop:
    """``asyncio.get_running_loop()``: the running loop, or RuntimeError outside one."""
    loop = _LAST[0]
    if loop is not None and loop._thread_id == _get_ident():  # type: ignore[attr-defined]
        return loop
    found = _get_running_loop()
    if isinstance(found, _BASE):
        _LAST[0] = found
    return found


async def to_thread(fn: Callable[..., T], /, *args: Any) -> T:
    """``asyncio.to_thread(fn, *args)``: run in the loop's default executor, in a copy of this
    context, the loop found by ``running_loop``."""
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    return await running_loop().run_in_executor(None, call)


def _forget() -> None:
    _LAST[0] = None


os.register_at_fork(after_in_child=_forget)


class Process:
    """This process's id, kept by a fork hook."""

    pid = os.getpid()

    @classmethod
    def forked(cls) -> None:
        cls.pid = os.getpid()


os.register_at_fork(after_in_child=Process.forked)
