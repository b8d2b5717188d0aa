"""Real servers on free local ports, each in a thread: uvicorn (ASGI) and waitress (WSGI)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn
from waitress.server import create_server


class _ThreadedUvicorn(uvicorn.Server):
    # Signal handlers belong to the main thread (the test runner), never to this server.
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _wait_until(ready: Any, what: str, thread: threading.Thread) -> None:
    deadline = time.monotonic() + 20.0
    while not ready():
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.01)


@contextlib.contextmanager
def uvicorn_server(app: Any) -> Iterator[str]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="off",
        ws="none",
        http="h11",
        loop="asyncio",
        access_log=False,
        backlog=256,
    )
    server = _ThreadedUvicorn(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        _wait_until(lambda: server.started, "uvicorn", thread)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)
        sock.close()


@contextlib.contextmanager
def waitress_server(app: Any, threads: int = 64) -> Iterator[str]:
    server: Any = create_server(
        app, host="127.0.0.1", port=0, threads=threads, connection_limit=256, channel_timeout=60
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.effective_port}"
    finally:
        # Close everything from inside the server's own loop (closing its sockets from this
        # thread races with its select()); with its map empty the loop returns.
        def stop() -> None:
            for dispatcher in list(server._map.values()):
                dispatcher.close()

        server.trigger.pull_trigger(stop)
        thread.join(20)
        server.task_dispatcher.shutdown()
