"""Races and crashes across processes: two gRPC server processes over one SQLite store.

Many client threads send each request id to both at once: every request id's handler runs
once in all (one effect row), and every call for it gets that run's response (the copies that
arrived while it ran were ABORTED and retried by the client's retry policy). A server killed
(SIGKILL) in the middle of a run leaves its key held until the lease runs out; the retry at
the other server is ABORTED until then, then takes the key over and runs it, once."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import pytest

from tests.helpers.effects import child, create, rows
from tests.rpc.service import retry_options, stubs

ROOT = Path(__file__).resolve().parents[2]
REQUEST_IDS = 12
COPIES = 6  # per request id, alternating between the two servers


def _start(
    tmp_path: Path, n: int, store: str, effects: Path, run: float, lease: float
) -> tuple[subprocess.Popen[bytes], str]:
    port_file, proto = tmp_path / f"port-{n}", tmp_path / f"proto-{n}"
    proto.mkdir()
    args = (store, str(effects), str(proto), str(port_file), str(run), str(lease))
    process = child("tests.rpc.server_proc", *args)
    deadline = time.monotonic() + 30
    while not port_file.exists():  # the server writes its port once it serves
        assert process.poll() is None, "the server process ended"
        assert time.monotonic() < deadline, "the server process did not start"
        time.sleep(0.05)
    return process, f"127.0.0.1:{port_file.read_text()}"


@dataclass
class Servers:
    processes: list[subprocess.Popen[bytes]]
    addresses: list[str]
    effects: Path

    def rows(self, table: str) -> dict[str, int]:
        return dict(Counter(rows(self.effects, table)))


def _servers(tmp_path: Path, run: float, lease: float) -> Iterator[Servers]:
    effects = create(tmp_path / "effects.db")
    store = f"sqlite:///{tmp_path / 'records.db'}"
    started = [_start(tmp_path, n, store, effects, run, lease) for n in range(2)]
    try:
        yield Servers([p for p, _ in started], [a for _, a in started], effects)
    finally:
        for process, _ in started:
            process.kill()
            process.wait(timeout=30)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    yield from _servers(tmp_path, run=0.3, lease=30.0)


def _call(create: Any, request: Any) -> str:
    """Create, retried (beyond the policy's 5 attempts) while it is ABORTED."""
    for _ in range(40):
        try:
            return str(create(request, timeout=30).id)
        except grpc.RpcError as exc:
            if exc.code() is not grpc.StatusCode.ABORTED:
                raise
    raise AssertionError(f"{request.request_id} still in progress")


@pytest.mark.slow
def test_duplicates_across_two_server_processes_run_once(servers: Servers, pb2: ModuleType) -> None:
    channels = [grpc.insecure_channel(a, options=retry_options()) for a in servers.addresses]
    creates = [stubs(channel, pb2)[0] for channel in channels]
    calls = [(f"p-{i}", n % 2) for i in range(REQUEST_IDS) for n in range(COPIES)]

    def call(request_id: str, server: int) -> tuple[str, str]:
        request = pb2.CreateOrder(request_id=request_id, item="tea", quantity=1)
        return request_id, _call(creates[server], request)

    try:
        with ThreadPoolExecutor(max_workers=len(calls)) as pool:
            answers = list(pool.map(lambda c: call(*c), calls))
    finally:
        for channel in channels:
            channel.close()
    assert servers.rows("effects") == {f"p-{i}": 1 for i in range(REQUEST_IDS)}
    by_id: dict[str, set[str]] = {}
    for request_id, order in answers:
        by_id.setdefault(request_id, set()).add(order)
    assert all(len(orders) == 1 for orders in by_id.values()), by_id


@pytest.mark.slow
def test_a_server_killed_mid_run_is_taken_over_after_its_lease(
    pb2: ModuleType, tmp_path: Path
) -> None:
    for servers in _servers(tmp_path, run=3.0, lease=1.0):
        channels = [grpc.insecure_channel(a, options=retry_options()) for a in servers.addresses]
        first, other = (stubs(channel, pb2)[0] for channel in channels)
        request = pb2.CreateOrder(request_id="k-crash", item="tea", quantity=1)
        try:
            doomed = first.future(request, timeout=30)
            deadline = time.monotonic() + 30
            while servers.rows("began") == {}:  # the run is under way in the first server
                assert time.monotonic() < deadline, "the first server never began the run"
                time.sleep(0.02)
            os.kill(servers.processes[0].pid, signal.SIGKILL)
            with pytest.raises(grpc.RpcError):
                doomed.result()
            order = _call(other, request)
            assert _call(other, request) == order  # replayed from now on
        finally:
            for channel in channels:
                channel.close()
        assert servers.rows("began") == {"k-crash": 2}  # the killed run, and the take-over
        assert servers.rows("effects") == {"k-crash": 1}
