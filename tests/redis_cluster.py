"""Test-owned Redis processes: single servers, a 3-master cluster, a sentinel.

Each server runs from the ``redis-server`` binary on spare ports, keeps nothing on disk, and
is killed by its fixture or, at the latest, when the test session exits. The cluster is made
once per session, on first use, and shared.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.services import required

BINARY = shutil.which("redis-server")
CLI = shutil.which("redis-cli")


def need_binary() -> None:
    """Skip (or fail under MIDENG_REQUIRE_SERVICES=1) when redis-server is not installed."""
    if BINARY is not None and CLI is not None:
        return
    message = "redis-server / redis-cli are not installed"
    if required():
        pytest.fail(message + " and MIDENG_REQUIRE_SERVICES=1")
    pytest.skip(message)


def free_ports(n: int) -> list[int]:
    """n distinct ports nobody listens on right now (held together so they differ)."""
    held: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            held.append(s)
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class Server:
    """One redis-server process on a fixed port; kill() and start() again on the same port."""

    def __init__(self, *args: str, port: int | None = None, sentinel: bool = False) -> None:
        need_binary()
        self.port = port if port is not None else free_ports(1)[0]
        self.dir = Path(tempfile.mkdtemp(prefix=f"mideng-redis-{self.port}-"))
        self.args = list(args)
        self.sentinel = sentinel
        self.proc: subprocess.Popen[bytes] | None = None
        _ALL.append(self)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Server:
        assert BINARY is not None
        command = [BINARY]
        if self.sentinel:
            # A sentinel rewrites its config file, so it needs one of its own.
            conf = self.dir / "sentinel.conf"
            if not conf.exists():
                conf.write_text("\n".join(self.args) + "\n")
            command += [str(conf), "--sentinel"]
            extra = []
        else:
            extra = ["--save", "", "--appendonly", "no", *self.args]
        command += [
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--daemonize",
            "no",
            "--logfile",
            str(self.dir / "log"),
            *extra,
        ]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.monotonic() + 20
        while not _ping(self.port):
            if self.proc.poll() is not None or time.monotonic() > end:
                log = (self.dir / "log").read_text() if (self.dir / "log").exists() else ""
                self.stop()
                raise RuntimeError(f"redis-server on {self.port} did not start:\n{log[-2000:]}")
            time.sleep(0.02)
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown, no save; clients see the connection drop."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        self.kill()
        self.proc = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


_ALL: list[Server] = []


@atexit.register
def _reap() -> None:
    for server in _ALL:
        server.cleanup()


class Cluster:
    """Three masters, no replicas, every slot covered."""

    def __init__(self) -> None:
        ports = free_ports(6)
        self.servers = [
            Server(
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-port",
                str(bus),
                "--cluster-node-timeout",
                "5000",
                port=port,
            )
            for port, bus in zip(ports[:3], ports[3:], strict=True)
        ]
        try:
            self._create()
        except BaseException:
            for server in self.servers:
                server.cleanup()
            raise

    def _create(self) -> None:
        for server in self.servers:
            server.start()
        assert CLI is not None
        subprocess.run(
            [
                CLI,
                "--cluster",
                "create",
                *(f"127.0.0.1:{s.port}" for s in self.servers),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=60,
        )
        end = time.monotonic() + 30
        while not all(self._ok(s.port) for s in self.servers):
            if time.monotonic() > end:
                raise RuntimeError("the test cluster never reached cluster_state:ok")
            time.sleep(0.1)

    @staticmethod
    def _ok(port: int) -> bool:
        assert CLI is not None
        out = subprocess.run(
            [CLI, "-p", str(port), "cluster", "info"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
        return "cluster_state:ok" in out

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{s.port}" for s in self.servers)

    def client(self) -> Any:
        """A plain redis-py cluster client, for looking behind the store's back."""
        import redis.cluster

        mod: Any = redis.cluster
        return mod.RedisCluster(
            startup_nodes=[mod.ClusterNode("127.0.0.1", s.port) for s in self.servers]
        )


_cluster: Cluster | None = None
_cluster_pid = 0
_lock = threading.Lock()


def cluster() -> Cluster:
    """The session's cluster, made on first use."""
    global _cluster, _cluster_pid
    need_binary()
    with _lock:
        if _cluster is None or _cluster_pid != os.getpid():
            attempts = 3
            for attempt in range(attempts):
                try:
                    _cluster = Cluster()
                    break
                except (RuntimeError, subprocess.SubprocessError):
                    # A spare port can be taken between choosing and binding it; choose again.
                    if attempt == attempts - 1:
                        raise
            _cluster_pid = os.getpid()
        assert _cluster is not None
        return _cluster
