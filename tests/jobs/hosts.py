"""Host processes of the scheduler tests: started, each ready, and never left behind."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def ready_hosts(
    commands: list[list[str]], env: dict[str, str]
) -> Iterator[list[subprocess.Popen[str]]]:
    """A process per command, each having printed ``ready``; any still running at the end
    is killed."""
    hosts = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
        for command in commands
    ]
    try:
        for host in hosts:
            assert host.stdout is not None
            assert host.stdout.readline().strip() == "ready"
        yield hosts
    finally:
        for host in hosts:
            if host.poll() is None:
                host.kill()
                host.wait()
            if host.stdout is not None:
                host.stdout.close()
