"""A batch's calls after its first are made like it, without ``Guard.prepare``: each must be
the call prepare would make for its key, with an owner of its own."""

from __future__ import annotations

import dataclasses

from mideng import Guard
from mideng.context import request_id_scope
from mideng.core.flow import Call
from mideng.guard.owner_ids import OWNERS
from mideng.messaging import Message
from mideng.stores.memory import MemoryStore


async def handler(message: Message) -> None:
    return None


def fields(call: Call) -> dict[str, object]:
    out = {f.name: getattr(call, f.name) for f in dataclasses.fields(call) if f.init}
    del out["owner"], out["started"]
    return out


def test_a_call_made_like_the_first_is_the_call_prepare_makes() -> None:
    guard = Guard(MemoryStore(), lease=7.0, ttl=60.0, max_attempts=3)
    policy = guard.policy("stock")
    first = guard.prepare("stock", "order:1", handler, None, policy)
    for rid in (None, "req-9"):
        made = first.like("order:2", next(OWNERS.ids), rid)
        with request_id_scope(rid):
            prepared = guard.prepare("stock", "order:2", handler, None, policy)
        assert type(made) is Call
        assert fields(made) == fields(prepared)
        assert made.owner not in (first.owner, prepared.owner)
        assert made.started >= first.started
        assert made.request() is made
