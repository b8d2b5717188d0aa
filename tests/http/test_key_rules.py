"""The debounce gate under the key rules: text no store can hold is spelled out at the edge
instead of failing the request."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mideng.http.core import Incoming
from mideng.http.debounce import DebounceGate, Debouncer
from mideng.http.headers import Headers
from mideng.stores.base import Store
from tests.backends import Ctx, opened_store


@pytest.fixture(params=["memory", "sqlite", "postgresql", "redis"])
def store(request: pytest.FixtureRequest, ctx: Ctx) -> Iterator[Store]:
    yield from opened_store(request.param, ctx)


def test_debounce_at_the_edge_spells_out_a_lone_surrogate(store: Store) -> None:
    gate = DebounceGate(Debouncer(store, window=30), lambda request: request.headers.get("x-user"))
    request = Incoming("POST", "/orders/\udcff", "", Headers([("x-user", "ann\ud800")]))
    assert gate.check(request) is None
    refused = gate.check(request)
    assert refused is not None
    assert refused.status == 429
    other = Incoming("POST", "/orders/\udcff", "", Headers([("x-user", "bob")]))
    assert gate.check(other) is None
