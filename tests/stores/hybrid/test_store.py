"""The hybrid store: Redis copies answer duplicates; only the durable store may say "run"."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from mideng import Guard, open_store
from mideng.core.record import Claim, ClaimRequest, Outcome, Resolution, Status, Ticket
from mideng.errors import PayloadMismatchError
from mideng.stores.hybrid import HybridStore
from mideng.stores.redis import RedisStore
from mideng.stores.sqlite import SQLiteStore
from tests.backends_redis import delete_prefix, expiry_ms
from tests.services import REDIS_URL, need


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class CountingSQLite(SQLiteStore):
    """A durable store that counts the claims it is asked to decide."""

    claims = 0

    def claim(self, req: ClaimRequest) -> Claim:
        self.claims += 1
        return super().claim(req)

    async def aclaim(self, req: ClaimRequest) -> Claim:
        self.claims += 1
        return await super().aclaim(req)


@pytest.fixture
def hybrid(tmp_path: Path) -> Iterator[HybridStore]:
    need("redis")
    prefix = f"mideng-test-{uuid.uuid4().hex[:10]}"
    store = HybridStore(
        fast=RedisStore.from_url(REDIS_URL, prefix=prefix),
        durable=CountingSQLite(str(tmp_path / "durable.db")),
    )
    yield store
    store.close()
    delete_prefix(redis.Redis.from_url(REDIS_URL), prefix)


def durable_claims(store: HybridStore) -> int:
    assert isinstance(store.durable, CountingSQLite)
    return store.durable.claims


def request(key: str, fingerprint: str | None = None) -> ClaimRequest:
    return ClaimRequest("pay", key, uuid.uuid4().hex, 30, 60, fingerprint)


def test_duplicates_are_answered_by_redis_alone(hybrid: HybridStore) -> None:
    guard = Guard(hybrid)
    runs: list[str] = []

    def body() -> str:
        runs.append("paid")
        return "paid"

    assert guard.run("pay", "k1", body) == "paid"
    decided = durable_claims(hybrid)
    for _ in range(5):
        assert guard.run("pay", "k1", body) == "paid"
    assert durable_claims(hybrid) == decided
    assert runs == ["paid"]


def test_a_copy_exists_only_for_finished_records(hybrid: HybridStore) -> None:
    claim = hybrid.claim(request("k2"))
    assert claim.outcome is Outcome.ACQUIRED
    assert hybrid.fast.get("pay", "k2") is None  # never "processing" in Redis
    done = hybrid.complete(Ticket.of(claim.record), b'"ok"', "json", 60)
    copy = hybrid.fast.get("pay", "k2")
    assert copy == done
    assert done.expires_at is not None
    client = redis.Redis.from_url(REDIS_URL)
    assert expiry_ms(client, hybrid.fast.key("pay", "k2")) == math.ceil(done.expires_at * 1000)
    client.close()


def test_mismatch_from_the_copy(hybrid: HybridStore) -> None:
    guard = Guard(hybrid)
    guard.run("pay", "k3", lambda: 1, payload={"amount": 1})
    decided = durable_claims(hybrid)
    with pytest.raises(PayloadMismatchError):
        guard.run("pay", "k3", lambda: 2, payload={"amount": 2})
    assert durable_claims(hybrid) == decided


def test_recorded_failures_replay_from_the_copy(hybrid: HybridStore) -> None:
    guard = Guard(hybrid, on_error="record")

    def declined() -> None:
        raise ValueError("declined")

    with pytest.raises(ValueError, match="declined"):
        guard.run("pay", "k4", declined)
    copy = hybrid.fast.get("pay", "k4")
    assert copy is not None
    assert copy.status is Status.FAILED
    decided = durable_claims(hybrid)
    with pytest.raises(ValueError, match="declined"):
        guard.run("pay", "k4", declined)
    assert durable_claims(hybrid) == decided


def test_released_failures_leave_no_copy(hybrid: HybridStore) -> None:
    guard = Guard(hybrid)

    def broken() -> str:
        raise KeyError("missing")

    with pytest.raises(KeyError):
        guard.run("pay", "k5", broken)
    assert hybrid.fast.get("pay", "k5") is None
    assert guard.run("pay", "k5", lambda: "second try") == "second try"


def test_forget_and_resolve_keep_the_copy_true(hybrid: HybridStore) -> None:
    guard = Guard(hybrid)
    guard.run("pay", "k6", lambda: "first")
    assert guard.forget("pay", "k6") is True
    assert hybrid.fast.get("pay", "k6") is None
    assert guard.run("pay", "k6", lambda: "second") == "second"

    hybrid.claim(ClaimRequest("pay", "k7", "dead-holder", 0.05, 60))
    time.sleep(0.1)  # the holder's lease runs out: now it may be resolved
    settled = hybrid.resolve("pay", "k7", Resolution(b'"settled"', "json", False, 60))
    assert hybrid.fast.get("pay", "k7") == settled
    assert guard.run("pay", "k7", lambda: "never") == "settled"


def test_a_lost_copy_is_put_back_by_the_durable_replay(hybrid: HybridStore) -> None:
    guard = Guard(hybrid)
    guard.run("pay", "k8", lambda: "paid")
    hybrid.fast.forget("pay", "k8")
    decided = durable_claims(hybrid)
    assert guard.run("pay", "k8", lambda: "again") == "paid"
    assert durable_claims(hybrid) == decided + 1
    assert hybrid.fast.get("pay", "k8") is not None
    assert guard.run("pay", "k8", lambda: "again") == "paid"
    assert durable_claims(hybrid) == decided + 1


def test_an_older_copy_never_replaces_a_newer_one(hybrid: HybridStore) -> None:
    claim = hybrid.claim(request("k9"))
    newer = hybrid.complete(Ticket.of(claim.record), b'"new"', "json", 60)
    older = newer.with_(result=b'"old"', updated_at=newer.updated_at - 1)
    assert hybrid.fast.put(older) is False
    assert hybrid.fast.get("pay", "k9") == newer


def test_opened_by_url_with_a_durable_option(tmp_path: Path) -> None:
    need("redis")
    prefix = f"mideng-test-{uuid.uuid4().hex[:10]}"
    store = open_store(REDIS_URL, prefix=prefix, durable=f"sqlite:///{tmp_path / 'd.db'}")
    assert isinstance(store, HybridStore)
    assert isinstance(store.durable, SQLiteStore)
    assert store.self_expiring is False
    assert Guard(store).run("pay", "u1", lambda: 5) == 5
    assert store.durable.get("pay", "u1") is not None
    store.close()
    delete_prefix(redis.Redis.from_url(REDIS_URL), prefix)


@pytest.mark.anyio
async def test_async_duplicates_are_answered_by_redis_alone(hybrid: HybridStore) -> None:
    guard = Guard(hybrid)
    runs: list[int] = []

    async def body() -> str:
        runs.append(1)
        return "paid"

    assert await guard.arun("pay", "a1", body) == "paid"
    decided = durable_claims(hybrid)
    assert await guard.arun("pay", "a1", body) == "paid"
    assert durable_claims(hybrid) == decided
    assert await guard.aforget("pay", "a1") is True
    assert await hybrid.fast.aget("pay", "a1") is None
    assert await guard.arun("pay", "a1", body) == "paid"
    assert runs == [1, 1]
    await hybrid.aclose()
