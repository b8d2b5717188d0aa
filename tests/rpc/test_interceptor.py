"""IdempotencyInterceptor on a real ``grpc.server`` (its thread pool) and real clients with
a retry policy: a handler still running past the client's deadline has its effect once and
the retry gets its response; concurrent duplicates run once, the others ABORTED and then
answered by the retry; a key reused with another request is INVALID_ARGUMENT; a handler
error gives the key back; a streaming method is refused, saying why."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import pytest

from mideng import Guard, open_store
from mideng.errors import ConfigurationError
from mideng.rpc import REPLAYED, IdempotencyInterceptor, Method
from tests.rpc.codes import Codes, CodesInterceptor
from tests.rpc.service import CREATE, WATCH, Shop, retry_options, stubs


@dataclass
class Served:
    shop: Shop
    codes: Codes
    guard: Guard
    address: str
    pb2: ModuleType

    def client(self, retries: bool = True) -> tuple[Any, Any, grpc.Channel]:
        options = retry_options() if retries else [("grpc.enable_retries", 0)]
        channel = grpc.insecure_channel(self.address, options=options)
        create, watch = stubs(channel, self.pb2)
        return create, watch, channel


def _serve(pb2: ModuleType, tmp_path: Path, methods: Mapping[str, Method]) -> Iterator[Served]:
    store = open_store(f"sqlite:///{tmp_path / 'records.db'}")
    guard, shop, codes = Guard(store), Shop(pb2), Codes()
    interceptors = [CodesInterceptor(codes), IdempotencyInterceptor(guard, methods)]
    server = grpc.server(ThreadPoolExecutor(max_workers=16), interceptors=interceptors)
    server.add_generic_rpc_handlers((shop.handlers(asynchronous=False),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield Served(shop, codes, guard, f"127.0.0.1:{port}", pb2)
    finally:
        shop.open_gate()
        server.stop(None)
        store.close()


@pytest.fixture
def served(pb2: ModuleType, tmp_path: Path) -> Iterator[Served]:
    yield from _serve(pb2, tmp_path, {CREATE: Method(), WATCH: Method()})


def test_a_handler_past_the_clients_deadline_has_its_effect_once(served: Served) -> None:
    create, _, channel = served.client()
    request = served.pb2.CreateOrder(request_id="r-deadline", item="tea", quantity=2)
    served.shop.close_gate()  # the first run holds until the retry was refused once
    with channel:
        first = create.future(request, timeout=0.3)
        served.shop.wait_began("r-deadline")
        with pytest.raises(grpc.RpcError) as gave_up:
            first.result()
        assert gave_up.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        retry = create.future(request, timeout=30)
        served.codes.wait_for(grpc.StatusCode.ABORTED, 1)
        served.shop.open_gate()
        order = retry.result()
    assert (order.id, order.item, order.quantity) == ("order-1", "tea", 2)
    assert (REPLAYED, "true") in retry.trailing_metadata()
    assert served.shop.runs["r-deadline"] == 1
    assert served.shop.effects["r-deadline"] == 1


def test_concurrent_duplicates_run_once_and_the_retries_get_the_response(
    served: Served,
) -> None:
    create, _, channel = served.client()
    request = served.pb2.CreateOrder(request_id="r-storm", item="rice", quantity=1)
    served.shop.close_gate()
    with channel, ThreadPoolExecutor(max_workers=8) as pool:
        calls = [pool.submit(create, request, timeout=30) for _ in range(8)]
        served.codes.wait_for(grpc.StatusCode.ABORTED, 7)  # every copy but the running one
        served.shop.open_gate()
        orders = [call.result() for call in calls]
    assert {order.id for order in orders} == {"order-1"}
    assert served.shop.runs["r-storm"] == 1
    assert served.codes.seen[grpc.StatusCode.OK] == 8


def test_a_duplicate_without_retries_sees_aborted_then_the_replay(served: Served) -> None:
    create, _, channel = served.client(retries=False)
    request = served.pb2.CreateOrder(request_id="r-aborted", item="salt", quantity=1)
    served.shop.close_gate()
    with channel:
        first = create.future(request, timeout=30)
        served.shop.wait_began("r-aborted")
        with pytest.raises(grpc.RpcError) as refused:
            create(request, timeout=30)
        assert refused.value.code() is grpc.StatusCode.ABORTED
        assert "in progress" in (refused.value.details() or "")
        served.shop.open_gate()
        assert first.result().id == create(request, timeout=30).id == "order-1"
    assert served.shop.runs["r-aborted"] == 1


def test_a_key_reused_with_another_request_is_invalid_argument(served: Served) -> None:
    create, _, channel = served.client()
    pb2 = served.pb2
    with channel:
        create(pb2.CreateOrder(request_id="r-reuse", item="tea", quantity=1), timeout=30)
        with pytest.raises(grpc.RpcError) as reused:
            create(pb2.CreateOrder(request_id="r-reuse", item="tea", quantity=9), timeout=30)
    assert reused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "another request" in (reused.value.details() or "")
    assert served.shop.runs["r-reuse"] == 1


def test_a_handler_error_gives_the_key_back(served: Served) -> None:
    create, _, channel = served.client(retries=False)
    request = served.pb2.CreateOrder(request_id="r-fails", item="tea", quantity=1)
    served.shop.fail_first.add("r-fails")
    with channel:
        with pytest.raises(grpc.RpcError) as failed:
            create(request, timeout=30)
        assert failed.value.code() is grpc.StatusCode.INTERNAL  # the handler's own status
        order = create(request, timeout=30)
        assert create(request, timeout=30).id == order.id
    assert served.shop.runs["r-fails"] == 2
    assert served.shop.effects["r-fails"] == 1


def test_a_request_without_an_id_runs_unguarded(served: Served) -> None:
    create, _, channel = served.client()
    request = served.pb2.CreateOrder(item="tea", quantity=1)
    with channel:
        create(request, timeout=30)
        create(request, timeout=30)
    assert served.shop.runs[""] == 2


def test_a_streaming_method_is_refused_saying_why(served: Served) -> None:
    _, watch, channel = served.client()
    with channel, pytest.raises(grpc.RpcError) as refused:
        list(watch(served.pb2.CreateOrder(request_id="r-watch"), timeout=30))
    assert refused.value.code() is grpc.StatusCode.UNIMPLEMENTED
    assert "unary-unary methods only" in (refused.value.details() or "")
    assert served.shop.runs["r-watch"] == 0


def test_the_key_may_come_from_metadata(pb2: ModuleType, tmp_path: Path) -> None:
    methods = {CREATE: Method(metadata="idempotency-key", required=True)}
    for served in _serve(pb2, tmp_path, methods):
        create, watch, channel = served.client()
        request = pb2.CreateOrder(item="tea", quantity=1)
        with channel:
            # Watch is not named on this server: it passes through, streaming as it does.
            assert [o.item for o in watch(pb2.CreateOrder(item="jam"), timeout=30)] == ["jam"]
            first = create(request, metadata=(("idempotency-key", "m-1"),), timeout=30)
            again = create(request, metadata=(("idempotency-key", "m-1"),), timeout=30)
            with pytest.raises(grpc.RpcError) as keyless:
                create(request, timeout=30)
        assert first.id == again.id
        assert served.shop.runs[""] == 2  # the watch, and the one create
        assert keyless.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "idempotency-key" in (keyless.value.details() or "")


def test_a_method_is_configured_with_one_place_for_its_key() -> None:
    with pytest.raises(ConfigurationError):
        Method(field="request_id", metadata="idempotency-key")
    with pytest.raises(ConfigurationError):
        Method(field="")
    assert Method().request_field() == "request_id"
    assert Method(metadata="idempotency-key").request_field() is None
    with pytest.raises(ConfigurationError):
        Method(metadata="Idempotency-Key")
    with pytest.raises(ConfigurationError, match=r"package\.Service/Method"):
        IdempotencyInterceptor(Guard(open_store("memory://")), {"Create": Method()})
