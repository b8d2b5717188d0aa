from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.backends import BACKENDS, Backend, Ctx, Opened
from tests.runner import AsyncRunner, Runner
from tests.services import need


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[Ctx]:
    context = Ctx(tmp_path)
    yield context
    for cleanup in reversed(context.cleanups):
        cleanup()


def _open(backend: Backend, ctx: Ctx) -> Iterator[Opened]:
    if backend.service is not None:
        need(backend.service)
    opened = backend.make(ctx)
    yield opened
    opened.store.close()


@pytest.fixture(params=BACKENDS, ids=lambda b: b.name)
def backend(request: pytest.FixtureRequest) -> Backend:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def opened(backend: Backend, ctx: Ctx) -> Iterator[Opened]:
    yield from _open(backend, ctx)


@pytest.fixture(params=[b for b in BACKENDS if b.shared], ids=lambda b: b.name)
def shared_backend(request: pytest.FixtureRequest) -> Backend:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def shared(shared_backend: Backend, ctx: Ctx) -> Iterator[Opened]:
    yield from _open(shared_backend, ctx)


@pytest.fixture(params=["sync", "async"])
def runner(request: pytest.FixtureRequest, opened: Opened) -> Iterator[Runner]:
    """The driver under test; async runs share one loop, closed with the store's async side."""
    run: Runner = Runner() if request.param == "sync" else AsyncRunner()
    yield run
    if isinstance(run, AsyncRunner):
        run.submit(opened.store.aclose())
    run.close()


@pytest.fixture
def registry() -> Iterator[Any]:
    """Metrics on, on a prometheus-client registry of this test's own; off again afterwards."""
    from prometheus_client import CollectorRegistry

    from mideng.observability import metrics

    reg = CollectorRegistry()
    metrics.enable(reg)
    yield reg
    metrics.disable()
    assert metrics.enabled() is None
