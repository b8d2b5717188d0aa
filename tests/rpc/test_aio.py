"""AsyncIdempotencyInterceptor on a real ``grpc.aio.server`` and ``grpc.aio`` clients with a
retry policy, all on one event loop: concurrent duplicates run once (the others ABORTED, then
answered by their retries), a handler past the client's deadline (cancelled by grpc.aio)
has its effect once, a key reused with another request is INVALID_ARGUMENT, and a handler
error gives the key back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import grpc.aio
import pytest

from mideng import Guard, open_store
from mideng.rpc import REPLAYED, AsyncIdempotencyInterceptor, Method
from tests.rpc.codes import AsyncCodesInterceptor, Codes
from tests.rpc.service import CREATE, WATCH, Shop, retry_options, stubs


@asynccontextmanager
async def serving(
    pb2: ModuleType, tmp_path: Path, retries: bool = True
) -> AsyncIterator[tuple[Shop, Codes, Any, Any]]:
    store = open_store(f"sqlite:///{tmp_path / 'records.db'}")
    guard, shop, codes = Guard(store), Shop(pb2), Codes()
    shop.agate = asyncio.Event()
    shop.agate.set()
    methods = {CREATE: Method(), WATCH: Method()}
    interceptors = [AsyncCodesInterceptor(codes), AsyncIdempotencyInterceptor(guard, methods)]
    server = grpc.aio.server(interceptors=interceptors)
    server.add_generic_rpc_handlers((shop.handlers(asynchronous=True),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    options = retry_options() if retries else [("grpc.enable_retries", 0)]
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options)
    try:
        create, watch = stubs(channel, pb2)
        yield shop, codes, create, watch
    finally:
        shop.agate.set()
        await channel.close()
        await server.stop(None)
        await store.aclose()
        store.close()


async def _aborted(codes: Codes, count: int) -> None:
    await asyncio.to_thread(codes.wait_for, grpc.StatusCode.ABORTED, count)


def _run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def test_concurrent_duplicates_run_once(pb2: ModuleType, tmp_path: Path) -> None:
    async def test() -> None:
        async with serving(pb2, tmp_path) as (shop, codes, create, _):
            request = pb2.CreateOrder(request_id="a-storm", item="rice", quantity=1)
            shop.agate.clear()
            calls = [asyncio.ensure_future(create(request, timeout=30)) for _ in range(8)]
            await _aborted(codes, 7)
            shop.agate.set()
            orders = await asyncio.gather(*calls)
            assert {order.id for order in orders} == {"order-1"}
            assert shop.runs["a-storm"] == 1

    _run(test)


def test_a_handler_past_the_deadline_has_its_effect_once(pb2: ModuleType, tmp_path: Path) -> None:
    """grpc.aio cancels a call's handler when its deadline passes: the cancelled run gives
    the key back before its effect, and the client's next call runs it, once."""

    async def test() -> None:
        async with serving(pb2, tmp_path) as (shop, codes, create, _):
            request = pb2.CreateOrder(request_id="a-deadline", item="tea", quantity=2)
            shop.agate.clear()
            with pytest.raises(grpc.aio.AioRpcError) as gave_up:
                await create(request, timeout=0.3)
            assert gave_up.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
            # The server cancels the handler on its own time, after the client gave up.
            await asyncio.to_thread(codes.wait_ended, 1)
            shop.agate.set()
            order = await create(request, timeout=30)
            replayed = create(request, timeout=30)
            assert (await replayed).id == order.id == "order-1"
            assert (REPLAYED, "true") in tuple(await replayed.trailing_metadata())
            assert shop.began["a-deadline"] == 2  # the cancelled run, and the one that ran
            assert shop.effects["a-deadline"] == 1

    _run(test)


def test_a_reused_key_is_invalid_and_an_error_gives_the_key_back(
    pb2: ModuleType, tmp_path: Path
) -> None:
    async def test() -> None:
        async with serving(pb2, tmp_path, retries=False) as (shop, _, create, _watch):
            await create(pb2.CreateOrder(request_id="a-reuse", item="tea", quantity=1))
            with pytest.raises(grpc.aio.AioRpcError) as reused:
                await create(pb2.CreateOrder(request_id="a-reuse", item="tea", quantity=5))
            assert reused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            shop.fail_first.add("a-fails")
            failing = pb2.CreateOrder(request_id="a-fails", item="tea", quantity=1)
            with pytest.raises(grpc.aio.AioRpcError) as failed:
                await create(failing)
            assert failed.value.code() is grpc.StatusCode.INTERNAL
            assert (await create(failing)).id == (await create(failing)).id
            assert shop.runs == {"a-reuse": 1, "a-fails": 2}

    _run(test)


def test_a_streaming_method_is_refused(pb2: ModuleType, tmp_path: Path) -> None:
    async def test() -> None:
        async with serving(pb2, tmp_path) as (shop, _, _create, watch):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                async for _ in watch(pb2.CreateOrder(request_id="a-watch"), timeout=30):
                    pass
            assert refused.value.code() is grpc.StatusCode.UNIMPLEMENTED
            assert shop.runs["a-watch"] == 0

    _run(test)
