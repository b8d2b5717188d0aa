"""The test service: ``shop.proto`` compiled by grpcio-tools when the session starts (nothing
generated is kept in the repository), an Orders servicer whose handler counts its effects,
and the servers and clients the tests start: a real ``grpc.server`` in its thread pool, a
real ``grpc.aio.server`` on the test's loop, clients with a retry policy."""

from __future__ import annotations

import importlib.util
import json
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc

CREATE = "/shop.Orders/Create"
WATCH = "/shop.Orders/Watch"


def compile_proto(out: Path) -> ModuleType:
    """``shop_pb2`` compiled from shop.proto into ``out`` and loaded."""
    from grpc_tools import protoc  # type: ignore[import-untyped]

    here = Path(__file__).parent
    done = protoc.main(["protoc", f"-I{here}", f"--python_out={out}", str(here / "shop.proto")])
    assert done == 0, "protoc failed"
    spec = importlib.util.spec_from_file_location("shop_pb2", out / "shop_pb2.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def retry_options(attempts: int = 5, statuses: tuple[str, ...] = ("ABORTED",)) -> list[Any]:
    """A channel whose calls to shop.Orders are retried on ``statuses`` with backoff."""
    config = {
        "methodConfig": [
            {
                "name": [{"service": "shop.Orders"}],
                "retryPolicy": {
                    "maxAttempts": attempts,
                    "initialBackoff": "0.1s",
                    "maxBackoff": "0.5s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": list(statuses),
                },
            }
        ]
    }
    return [("grpc.enable_retries", 1), ("grpc.service_config", json.dumps(config))]


class Shop:
    """The servicer's state: what each request id did (``effects``, ``runs``), and how a run
    behaves: it waits for ``gate`` (``agate`` on the aio server; both open unless a test
    closes them), and a first run of an id in ``fail_first`` aborts."""

    def __init__(self, pb2: ModuleType) -> None:
        self.pb2 = pb2
        self.effects: Counter[str] = Counter()
        self.runs: Counter[str] = Counter()
        self.fail_first: set[str] = set()
        self.lock = threading.Lock()
        self.entered = threading.Condition()  # a run has begun (before the gate)
        self.began: Counter[str] = Counter()
        self.gate = threading.Event()
        self.gate.set()
        self.agate: Any = None  # an asyncio.Event, made on the aio server's loop

    def enter(self, request: Any) -> None:
        with self.entered:
            self.began[request.request_id] += 1
            self.entered.notify_all()

    def wait_began(self, request_id: str) -> None:
        with self.entered:
            assert self.entered.wait_for(lambda: self.began[request_id] > 0, 30)

    def close_gate(self) -> None:
        self.gate.clear()

    def open_gate(self) -> None:
        self.gate.set()

    def order(self, request: Any) -> Any:
        """One run: an effect counted, unless it is a first run meant to fail."""
        with self.lock:
            self.runs[request.request_id] += 1
            failing = request.request_id in self.fail_first and self.runs[request.request_id] == 1
            if not failing:
                self.effects[request.request_id] += 1
            number = sum(self.effects.values())
        return failing, self.pb2.Order(
            id=f"order-{number}", item=request.item, quantity=request.quantity
        )

    def create(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.enter(request)
        assert self.gate.wait(30), "the test never opened the gate"
        failing, order = self.order(request)
        if failing:
            context.abort(grpc.StatusCode.INTERNAL, "the warehouse did not answer")
        return order

    async def acreate(self, request: Any, context: Any) -> Any:
        self.enter(request)
        if self.agate is not None:
            await self.agate.wait()
        failing, order = self.order(request)
        if failing:
            await context.abort(grpc.StatusCode.INTERNAL, "the warehouse did not answer")
        return order

    def watch(self, request: Any, context: Any) -> Iterator[Any]:
        yield self.order(request)[1]

    def handlers(self, asynchronous: bool) -> grpc.GenericRpcHandler:
        pb2 = self.pb2
        create = self.acreate if asynchronous else self.create
        return grpc.method_handlers_generic_handler(
            "shop.Orders",
            {
                "Create": grpc.unary_unary_rpc_method_handler(
                    create, pb2.CreateOrder.FromString, pb2.Order.SerializeToString
                ),
                "Watch": grpc.unary_stream_rpc_method_handler(
                    self.watch, pb2.CreateOrder.FromString, pb2.Order.SerializeToString
                ),
            },
        )


def stubs(channel: Any, pb2: ModuleType) -> tuple[Any, Any]:
    """The client's Create and Watch calls on ``channel``."""
    create = channel.unary_unary(
        CREATE,
        request_serializer=pb2.CreateOrder.SerializeToString,
        response_deserializer=pb2.Order.FromString,
    )
    watch = channel.unary_stream(
        WATCH,
        request_serializer=pb2.CreateOrder.SerializeToString,
        response_deserializer=pb2.Order.FromString,
    )
    return create, watch
