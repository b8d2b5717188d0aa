"""This process's id, kept by a fork hook.

The stores check for a fork on every operation (a child must open connections of its own,
never talk over its parent's sockets), and ``os.getpid()`` asked each time is a system call:
about a microsecond on a virtual machine with its mitigations.
"""

from __future__ import annotations

import os


class Process:
    """This process's id (``Process.pid``), renewed in a forked child."""

    pid = os.getpid()

    @classmethod
    def forked(cls) -> None:
        cls.pid = os.getpid()


os.register_at_fork(after_in_child=Process.forked)
