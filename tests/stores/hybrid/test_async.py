"""The hybrid store's async operations are its own: none runs a sync client in a thread."""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from mideng import open_store
from mideng.core.record import ClaimRequest, Outcome, Resolution, Status, Ticket
from mideng.errors import ConfigurationError
from mideng.stores.base import Store
from mideng.stores.hybrid import HybridStore
from mideng.stores.memory import MemoryStore
from mideng.stores.redis import RedisStore
from tests.backends_redis import delete_prefix
from tests.services import REDIS_URL, need


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_every_async_operation_is_written_in_the_hybrid_itself() -> None:
    twins = [
        name
        for name, member in inspect.getmembers(Store)
        if inspect.iscoroutinefunction(member) and not name.startswith("_")
    ]
    assert {"aresolve", "aunresolved", "apurge"} <= set(twins)
    assert [name for name in twins if name not in vars(HybridStore)] == []


@pytest.fixture
def hybrid(monkeypatch: pytest.MonkeyPatch) -> Iterator[HybridStore]:
    need("redis")
    prefix = f"mideng-test-{uuid.uuid4().hex[:10]}"
    # The memory store's async operations never leave the loop either, so any thread hop
    # below would be the hybrid's.
    store = HybridStore(fast=RedisStore.from_url(REDIS_URL, prefix=prefix), durable=MemoryStore())

    def no_threads(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an async operation ran sync code in a thread")

    def no_sync_redis(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an async operation used the sync Redis client")

    monkeypatch.setattr(asyncio, "to_thread", no_threads)
    monkeypatch.setattr(asyncio.BaseEventLoop, "run_in_executor", no_threads)
    monkeypatch.setattr(store.fast, "_run", no_sync_redis)
    monkeypatch.setattr(store.fast, "_connection", no_sync_redis)
    yield store
    monkeypatch.undo()
    store.close()
    delete_prefix(redis.Redis.from_url(REDIS_URL), prefix)


@pytest.mark.anyio
async def test_resolve_unresolved_and_purge_are_native(hybrid: HybridStore) -> None:
    claim = await hybrid.aclaim(ClaimRequest("pay", "n1", "dead-holder", 0.05, 60))
    assert claim.outcome is Outcome.ACQUIRED
    await asyncio.sleep(0.1)  # the holder's lease runs out: now it is unresolved
    stuck = await hybrid.aunresolved("pay")
    assert [(r.scope, r.key) for r in stuck] == [("pay", "n1")]
    settled = await hybrid.aresolve("pay", "n1", Resolution(b'"settled"', "json", False, 0.05))
    assert settled.status is Status.SUCCEEDED
    assert await hybrid.fast.aget("pay", "n1") == settled  # the copy follows the resolve
    assert await hybrid.aunresolved() == []
    await asyncio.sleep(0.1)  # the settled record's retention runs out
    assert await hybrid.apurge() == 1
    await hybrid.aclose()


@pytest.mark.anyio
async def test_every_other_async_operation_is_native(hybrid: HybridStore) -> None:
    ticket = Ticket.of((await hybrid.aclaim(ClaimRequest("pay", "n2", "holder", 30, 60))).record)
    await hybrid.aheartbeat(ticket, 30, 60)
    done = await hybrid.acomplete(ticket, b"1", "json", 60)
    assert (await hybrid.aclaim(ClaimRequest("pay", "n2", "other", 30, 60))).record == done
    assert await hybrid.aget("pay", "n2") == done
    assert await hybrid.aforget("pay", "n2") is True
    ticket = Ticket.of((await hybrid.aclaim(ClaimRequest("pay", "n3", "holder", 30, 60))).record)
    await hybrid.arelease(ticket)
    ticket = Ticket.of((await hybrid.aclaim(ClaimRequest("pay", "n3", "again", 30, 60))).record)
    failed = await hybrid.afail(ticket, b"declined", 60)
    assert await hybrid.fast.aget("pay", "n3") == failed
    await hybrid.aput_token("submit", "u1", "t1", 60)
    assert await hybrid.atake_token("submit", "u1", "t1") is True
    assert await hybrid.ahit("click", "u1", 60, 1) is None
    await hybrid.aclose()


def test_durable_needs_redis_in_front() -> None:
    with pytest.raises(ConfigurationError, match="durable= needs a Redis URL"):
        open_store("memory://", durable="memory://")
