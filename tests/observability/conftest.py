from __future__ import annotations

from collections.abc import Iterator

import pytest

from mideng.observability import metrics, observers, tracing
from tests.observability.otel import MemoryTracerProvider


@pytest.fixture
def spans() -> Iterator[MemoryTracerProvider]:
    """Tracing on, into an in-memory provider; off again afterwards."""
    provider = MemoryTracerProvider()
    tracing.enable(provider)
    yield provider
    tracing.disable()


@pytest.fixture(autouse=True)
def _nothing_left_on() -> Iterator[None]:
    yield
    metrics.disable()
    tracing.disable()
    assert observers.on is None


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
