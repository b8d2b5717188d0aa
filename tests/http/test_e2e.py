"""End to end over real sockets: 50 concurrent identical POSTs with one Idempotency-Key.

FastAPI under uvicorn and Flask under waitress, hit by httpx from 50 threads. The handler holds
until the test releases it, so the duplicates really overlap the first call.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.http.http_serve import FRAMEWORKS, serve

CALLERS = 50


@contextlib.contextmanager
def fire(url: str, key: str) -> Iterator[list[concurrent.futures.Future[httpx.Response]]]:
    limits = httpx.Limits(max_connections=CALLERS + 10)
    with (
        httpx.Client(base_url=url, timeout=60.0, limits=limits) as client,
        concurrent.futures.ThreadPoolExecutor(CALLERS) as pool,
    ):
        yield [
            pool.submit(client.post, "/slow", json={"order": 1}, headers={"idempotency-key": key})
            for _ in range(CALLERS)
        ]


@pytest.mark.parametrize("kind", FRAMEWORKS)
def test_wait_mode_every_caller_gets_the_one_result(kind: str) -> None:
    key = f'"{uuid.uuid4().hex}"'
    label = f"-/{key}"
    with serve(kind, in_progress="wait") as served, fire(served.url, key) as futures:
        served.rec.wait_started(label)
        served.rec.wait_arrivals(CALLERS)
        served.rec.release(label)
        responses = [f.result(timeout=60) for f in futures]
    assert served.rec.count(label) == 1
    assert {r.status_code for r in responses} == {200}
    assert len({r.content for r in responses}) == 1
    assert sum("idempotent-replayed" in r.headers for r in responses) == CALLERS - 1


@pytest.mark.parametrize("kind", FRAMEWORKS)
def test_raise_mode_one_success_and_the_rest_409(kind: str) -> None:
    key = f'"{uuid.uuid4().hex}"'
    label = f"-/{key}"
    with serve(kind, in_progress="raise") as served, fire(served.url, key) as futures:
        served.rec.wait_started(label)
        refused = []
        for future in concurrent.futures.as_completed(futures, timeout=60):
            refused.append(future.result())
            if len(refused) == CALLERS - 1:
                break
        served.rec.release(label)
        responses = [f.result(timeout=60) for f in futures]
    assert served.rec.count(label) == 1
    assert {r.status_code for r in refused} == {409}
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [409] * (CALLERS - 1)
    assert all(
        r.headers["content-type"] == "application/problem+json"
        for r in responses
        if r.status_code == 409
    )
