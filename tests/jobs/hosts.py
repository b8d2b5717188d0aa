"""Host processes of the scheduler tests: started, each ready, and never left behind."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def ready_hosts(
    commands: list[list[str]], env: dict[str, str]
) -> Iterator[list[subprocess.Popen[str]]]:
    """A process per command, each having printed ``ready``, its standard input a pipe;
    any still running at the end is killed."""
    hosts = [
        subprocess.Popen(command, env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
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
            for pipe in (host.stdin, host.stdout):
                if pipe is not None:
                    pipe.close()
