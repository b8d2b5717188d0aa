"""A gRPC server in a process of its own, for the races and crashes across processes: the
Orders service behind IdempotencyInterceptor over a shared SQLite store; each run of Create
records that it began, waits ``RUN`` seconds, and records its effect, as rows of a shared
SQLite table. ``python -m tests.rpc.server_proc STORE EFFECTS PROTO_DIR PORT_FILE RUN
LEASE``; it serves until killed."""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from mideng import Guard, open_store
from mideng.rpc import IdempotencyInterceptor, Method
from tests.helpers.effects import record
from tests.rpc.service import CREATE, compile_proto


def main(
    store_url: str, effects: str, proto_dir: str, port_file: str, run: str, lease: str
) -> None:
    pb2 = compile_proto(Path(proto_dir))
    guard = Guard(open_store(store_url))

    def create(request: Any, context: grpc.ServicerContext) -> Any:
        record(effects, "began", request.request_id)
        time.sleep(float(run))  # the window other copies, or a kill -9, arrive in
        number = record(effects, "effects", request.request_id)
        return pb2.Order(id=f"order-{number}", item=request.item)

    handlers = grpc.method_handlers_generic_handler(
        "shop.Orders",
        {
            "Create": grpc.unary_unary_rpc_method_handler(
                create, pb2.CreateOrder.FromString, pb2.Order.SerializeToString
            )
        },
    )
    server = grpc.server(
        ThreadPoolExecutor(max_workers=32),
        interceptors=[
            IdempotencyInterceptor(guard, {CREATE: Method(options={"lease": float(lease)})})
        ],
    )
    server.add_generic_rpc_handlers((handlers,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    Path(port_file).write_text(str(port))
    server.wait_for_termination()


if __name__ == "__main__":
    main(*sys.argv[1:7])
