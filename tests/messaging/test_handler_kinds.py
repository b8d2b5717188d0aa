"""Every kind of callable a user passes as a handler runs: an async def, a def, an object whose
``__call__`` is an async def, a partial over one, and a def that hands back a coroutine. The
last three were once run as sync handlers whose coroutine nobody awaited: the message was
acked as run while its body never ran."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import pytest

from mideng import Guard
from mideng.core.callables import is_async
from mideng.messaging import Ack, IdempotentConsumer, Message
from mideng.stores.memory import MemoryStore

RUNS: list[str] = []


async def record(message: Message, tag: str = "fn") -> None:
    await asyncio.sleep(0)
    RUNS.append(tag)


class Handler:
    async def __call__(self, message: Message) -> None:
        await record(message, "object")


class SyncHandler:
    def __call__(self, message: Message) -> None:
        RUNS.append("sync object")


def plain(message: Message) -> None:
    RUNS.append("def")


KINDS: dict[str, tuple[Callable[..., Any], str, bool]] = {
    "async def": (record, "fn", True),
    "def": (plain, "def", False),
    "async __call__": (Handler(), "object", True),
    "partial of async __call__": (functools.partial(Handler()), "object", True),
    "partial of async def": (functools.partial(record, tag="partial"), "partial", True),
    "sync __call__": (SyncHandler(), "sync object", False),
    "def returning a coroutine": (lambda m: record(m, "lambda"), "lambda", False),
}


@pytest.mark.parametrize("kind", KINDS, ids=list(KINDS))
def test_every_kind_of_handler_runs_exactly_once(kind: str) -> None:
    handler, tag, coroutine = KINDS[kind]
    assert is_async(handler) is coroutine
    RUNS.clear()
    consumer = IdempotentConsumer(Guard(MemoryStore()), "stock", handler)
    message = Message(b"{}", {"idempotency-key": "order:1"})
    assert asyncio.run(consumer.handle(message)) == Ack(ran=True)
    assert asyncio.run(consumer.handle(message)) == Ack(ran=False)
    assert [tag] == RUNS


def test_bound_methods_and_builtins_are_told_apart() -> None:
    class Service:
        async def handle(self, message: Message) -> None: ...

        def sync(self, message: Message) -> None: ...

    assert is_async(Service().handle)
    assert not is_async(Service().sync)
    assert not is_async(print)
    assert not is_async(functools.partial(print, "x"))
