"""@idempotent_view behind a real server: uvicorn serving the test project's ASGI application
with two worker processes over one SQLite store. Eight clients send one key at once; the
view's body runs once (counted in a file, as the workers share no memory), the others get its
response replayed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.brokers import spare_port

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = 8


@dataclass(frozen=True)
class Served:
    url: str
    runs: Path  # the folder where each view writes a line a run


def ready(url: str, server: subprocess.Popen[bytes], within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"uvicorn exited with {server.returncode}")
        try:
            if requests.get(f"{url}/v/cbv", timeout=1).status_code == 200:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"uvicorn did not answer within {within} s")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    runs = tmp_path / "runs"
    runs.mkdir()
    port = spare_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
        "DJANGO_SETTINGS_MODULE": "tests.http.djangoproject.live_settings",
        "MIDENG_LIVE_STORE": f"sqlite:///{tmp_path / 'store.db'}",
        "MIDENG_LIVE_RUNS": str(runs),
    }
    command = [sys.executable, "-m", "uvicorn", "tests.http.djangoproject.asgi:application"]
    options = ["--host", "127.0.0.1", "--port", str(port), "--workers", "2"]
    quiet = ["--lifespan", "off", "--log-level", "warning", "--no-access-log"]
    # A session of its own, so the supervisor and its workers stop together.
    server = subprocess.Popen(command + options + quiet, cwd=ROOT, env=env, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        ready(url, server, within=60.0)
        yield Served(url, runs)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(20)


def send(url: str, idem: str, start: threading.Barrier) -> requests.Response:
    """One client's request, sent again while the first with its key runs (409)."""
    headers = {
        "Idempotency-Key": idem,
        "Content-Type": "application/json",
        "X-User": "alice",  # Django's request.user
        "Authorization": "User alice",  # DRF's
    }
    deadline = time.monotonic() + 60.0
    with requests.Session() as session:
        start.wait()
        while True:
            response = session.post(url, data=b'{"item": 1}', headers=headers, timeout=30)
            if response.status_code != 409 or time.monotonic() > deadline:
                return response
            time.sleep(0.05)


@pytest.mark.parametrize(
    ("path", "name"), [("/v/fbv", "fbv"), ("/v/viewset/place", "viewset"), ("/v/afbv", "afbv")]
)
def test_eight_clients_one_key_two_workers_one_run(served: Served, path: str, name: str) -> None:
    idem = f'"{uuid.uuid4().hex}"'
    start = threading.Barrier(CLIENTS)
    with ThreadPoolExecutor(CLIENTS) as clients:
        sent = [clients.submit(send, served.url + path, idem, start) for _ in range(CLIENTS)]
        answers = [answer.result(timeout=90) for answer in sent]
    assert len(answers) == CLIENTS
    assert {a.status_code for a in answers} == {201}, [a.text for a in answers]
    assert len({a.content for a in answers}) == 1
    assert sorted(a.headers.get("Idempotent-Replayed", "") for a in answers) == [""] + ["true"] * (
        CLIENTS - 1
    )
    assert (served.runs / name).read_text().splitlines() == [f"{name}/alice/{idem}"]
