"""The race across processes: two gRPC server processes over one SQLite store, and many
client threads sending each request id to both at once. Every request id's handler runs once
in all (one effect row), and every call for it gets that run's response: the copies that
arrived while it ran were ABORTED and retried by the client's retry policy."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType

import grpc
import pytest

from tests.rpc.service import retry_options, stubs

ROOT = Path(__file__).resolve().parents[2]
REQUEST_IDS = 12
COPIES = 6  # per request id, alternating between the two servers


def _start(
    tmp_path: Path, n: int, store: str, effects: Path
) -> tuple[subprocess.Popen[bytes], str]:
    port_file = tmp_path / f"port-{n}"
    paths = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    proto = tmp_path / f"proto-{n}"
    proto.mkdir()
    args = [
        sys.executable,
        "-m",
        "tests.rpc.server_proc",
        store,
        str(effects),
        str(proto),
        str(port_file),
    ]
    process = subprocess.Popen(args, cwd=ROOT, env=env)
    deadline = time.monotonic() + 30
    while not port_file.exists():  # the server writes its port once it serves
        assert process.poll() is None, "the server process ended"
        assert time.monotonic() < deadline, "the server process did not start"
        time.sleep(0.05)
    return process, f"127.0.0.1:{port_file.read_text()}"


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[list[str], Path]]:
    effects = tmp_path / "effects.db"
    with sqlite3.connect(effects) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE effects (id INTEGER PRIMARY KEY, request_id TEXT NOT NULL)")
    store = f"sqlite:///{tmp_path / 'records.db'}"
    started = [_start(tmp_path, n, store, effects) for n in range(2)]
    try:
        yield [address for _, address in started], effects
    finally:
        for process, _ in started:
            process.kill()
            process.wait(timeout=30)


@pytest.mark.slow
def test_duplicates_across_two_server_processes_run_once(
    servers: tuple[list[str], Path], pb2: ModuleType
) -> None:
    addresses, effects = servers
    channels = [
        grpc.insecure_channel(a, options=retry_options(statuses=("ABORTED",))) for a in addresses
    ]
    creates = [stubs(channel, pb2)[0] for channel in channels]
    calls = [(f"p-{i}", n % 2) for i in range(REQUEST_IDS) for n in range(COPIES)]

    def call(request_id: str, server: int) -> tuple[str, str]:
        request = pb2.CreateOrder(request_id=request_id, item="tea", quantity=1)
        for _ in range(20):  # the retry policy's 5 attempts, again while the first runs long
            try:
                return request_id, creates[server](request, timeout=30).id
            except grpc.RpcError as exc:
                if exc.code() is not grpc.StatusCode.ABORTED:
                    raise
        raise AssertionError(f"{request_id} still in progress")

    try:
        with ThreadPoolExecutor(max_workers=len(calls)) as pool:
            answers = list(pool.map(lambda c: call(*c), calls))
    finally:
        for channel in channels:
            channel.close()
    with sqlite3.connect(effects) as db:
        rows = db.execute("SELECT request_id, COUNT(*) FROM effects GROUP BY request_id").fetchall()
    assert dict(rows) == {f"p-{i}": 1 for i in range(REQUEST_IDS)}
    by_id: dict[str, set[str]] = {}
    for request_id, order in answers:
        by_id.setdefault(request_id, set()).add(order)
    assert all(len(orders) == 1 for orders in by_id.values()), by_id
