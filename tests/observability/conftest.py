from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from mideng.observability import metrics, tracing, watch


@pytest.fixture
def registry() -> Iterator[CollectorRegistry]:
    """Metrics on, on a registry of this test's own; off again afterwards."""
    reg = CollectorRegistry()
    metrics.enable(reg)
    yield reg
    metrics.disable()
    assert metrics.enabled() is None


@pytest.fixture(autouse=True)
def _nothing_left_on() -> Iterator[None]:
    yield
    metrics.disable()
    tracing.disable()
    assert watch.on is None


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
