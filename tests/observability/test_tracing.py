"""One span per guarded call, with the documented attributes; a child span per store call."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from opentelemetry.trace import StatusCode

from mideng import Guard, open_store
from mideng.context import request_id_scope
from mideng.core.record import SUCCEEDED
from mideng.errors import ConfigurationError, PayloadMismatchError
from mideng.observability import tracing
from mideng.observability.tracing import key_hash
from tests.observability.otel import MemoryTracerProvider, RefusingTracerProvider


def test_one_span_per_call_with_its_attributes(tmp_path: Path, spans: MemoryTracerProvider) -> None:
    guard = Guard(open_store(f"sqlite:///{tmp_path / 'm.db'}"))
    inner: list[object] = []

    def charge(order: str) -> dict[str, str]:
        # The body runs inside the call's span: its own spans are children of it.
        from opentelemetry import trace

        inner.append(trace.get_current_span())
        return {"order": order}

    with request_id_scope("req-1"):
        guard.run("payments", "o-1", charge, "o-1", payload={"o": 1})
    with request_id_scope("req-2"):
        guard.run("payments", "o-1", charge, "o-1", payload={"o": 1})
        with pytest.raises(PayloadMismatchError):
            guard.run("payments", "o-1", charge, "o-1", payload={"o": 2})

    calls = spans.named("mideng.call")
    assert len(calls) == 3
    assert all(s.ended and s.parent is None for s in calls)
    first, replay, mismatch = calls
    assert inner == [first]
    hashed = key_hash("payments", "o-1")
    assert first.attributes == {
        "mideng.scope": "payments",
        "mideng.store": "sqlite",
        "mideng.request_id": "req-1",
        "mideng.key_hash": hashed,
        "mideng.outcome": "acquired",
        "mideng.fence": 1,
        "mideng.attempts": 1,
        "mideng.replayed": False,
    }
    assert replay.attributes["mideng.outcome"] == "replay"
    assert replay.attributes["mideng.replayed"] is True
    assert replay.attributes["mideng.request_id"] == "req-2"
    assert mismatch.attributes["mideng.outcome"] == "mismatch"
    assert mismatch.status.status_code is StatusCode.ERROR
    assert [type(e) for e in mismatch.exceptions] == [PayloadMismatchError]
    assert "mideng.key" not in first.attributes

    # Store calls are children of their call: claim and complete for the first, a claim each after.
    by_parent = {
        c.context.span_id: [s.name for s in spans.spans if s.parent == c.context] for c in calls
    }
    assert list(by_parent.values()) == [
        ["mideng.store.claim", "mideng.store.complete"],
        ["mideng.store.claim"],
        ["mideng.store.claim"],
    ]
    guard.close()


def test_a_failing_body_is_recorded_and_its_release_traced(spans: MemoryTracerProvider) -> None:
    guard = Guard(open_store("memory://"))

    def declined() -> None:
        raise ValueError("card declined")

    with pytest.raises(ValueError, match="declined"):
        guard.run("payments", "o-2", declined)
    [call] = spans.named("mideng.call")
    assert call.status.status_code is StatusCode.ERROR
    assert [str(e) for e in call.exceptions] == ["card declined"]
    children = [s.name for s in spans.spans if s.parent == call.context]
    assert children == ["mideng.store.claim", "mideng.store.release"]


@pytest.mark.anyio
async def test_async_calls_get_their_span_too(spans: MemoryTracerProvider) -> None:
    guard = Guard(open_store("memory://"))

    async def pay() -> int:
        return 1

    await guard.arun("payments", "a-1", pay)
    await guard.arun("payments", "a-1", pay)
    outcomes = [s.attributes["mideng.outcome"] for s in spans.named("mideng.call")]
    assert outcomes == ["acquired", "replay"]


def test_the_key_in_plain_only_when_asked() -> None:
    provider = MemoryTracerProvider()
    tracing.enable(provider, key="plain")
    Guard(open_store("memory://")).run("stock", "sku-9", lambda: 1)
    tracing.enable(provider, key="omit")
    Guard(open_store("memory://")).run("stock", "sku-9", lambda: 1)
    plain, omitted = provider.named("mideng.call")
    assert plain.attributes["mideng.key"] == "sku-9"
    assert "mideng.key_hash" not in plain.attributes
    assert not {"mideng.key", "mideng.key_hash"} & set(omitted.attributes)
    with pytest.raises(ConfigurationError):
        tracing.enable(provider, key="clear")


# A span's own failure at each step of a call: at the claim (acquired, or the replay), around
# the completion (before it is written: the body has run), and the call's span itself.
REFUSALS = [
    ("mideng.call", "start"),
    ("mideng.store.claim", "start"),
    ("mideng.store.claim", "end"),
    ("mideng.call", "attributes"),
    ("mideng.store.complete", "start"),
    ("mideng.store.complete", "end"),
    ("mideng.call", "end"),
]


@pytest.mark.parametrize("driver", ["run", "arun"])
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@pytest.mark.parametrize("target", REFUSALS, ids=[f"{n}-{p}" for n, p in REFUSALS])
def test_a_span_that_fails_never_fails_the_call(
    target: tuple[str, str], kind: str, driver: str, tmp_path: Path
) -> None:
    provider = RefusingTracerProvider()
    tracing.enable(provider)
    store = open_store("memory://" if kind == "memory" else f"sqlite:///{tmp_path / 'm.db'}")
    guard = Guard(store, lease=30.0)
    runs: list[int] = []

    def charge() -> str:
        runs.append(1)
        return "charged"

    async def acharge() -> str:
        return charge()

    def call() -> str:
        if driver == "run":
            return guard.run("pay", "p-1", charge)
        return asyncio.run(guard.arun("pay", "p-1", acharge))

    provider.target = target
    assert call() == "charged"
    assert provider.refused == 1
    record = guard.get("pay", "p-1")
    assert record is not None
    assert record.status is SUCCEEDED  # its completion was written
    provider.refused = 0  # the replay's span fails once too, where it has that span
    assert call() == "charged"
    assert runs == [1]
    guard.close()
