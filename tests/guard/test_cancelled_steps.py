"""An async operation cancelled while a step's result is recorded: the step's effect has
happened, so its result is recorded all the same and the re-run resumes after it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from mideng import Guard
from mideng.stores.base import Store
from tests.backends import Ctx, opened_store
from tests.guard.gates import cancel_at, gate


@pytest.fixture(params=["memory", "redis", "postgresql"])
def store(request: pytest.FixtureRequest, ctx: Ctx) -> Iterator[Store]:
    yield from opened_store(request.param, ctx)


def test_a_step_cancelled_at_its_record_is_not_run_again(store: Store) -> None:
    effects: list[str] = []
    guard = Guard(store, lease=60)

    @guard.step("charge")
    async def charge(order: str) -> str:
        effects.append(f"charge {order}")
        return f"charged {order}"

    @guard.step("notify")
    async def notify(order: str) -> str:
        effects.append(f"notify {order}")
        return "sent"

    @guard.operation("pay", key="{order}", steps=("charge", "notify"))
    async def pay(order: str) -> str:
        receipt = await charge(order)
        await notify(order)
        return receipt

    async def scenario() -> None:
        try:
            stop = gate(store, "arecord_step")
            await cancel_at(asyncio.create_task(pay("o-1")), stop)
            assert effects == ["charge o-1"]
            assert await pay("o-1") == "charged o-1"  # resumed after the recorded step
            assert effects == ["charge o-1", "notify o-1"]
            assert await pay("o-1") == "charged o-1"  # replayed
            assert effects == ["charge o-1", "notify o-1"]
        finally:
            await store.aclose()

    asyncio.run(scenario())
