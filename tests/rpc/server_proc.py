"""A gRPC server in a process of its own, for the race across processes: the Orders service
behind IdempotencyInterceptor over a shared SQLite store; each run of Create records its
effect as a row of a shared SQLite table. ``python -m tests.rpc.server_proc STORE EFFECTS
PROTO_DIR PORT_FILE``; it serves until killed."""

from __future__ import annotations

import sqlite3
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from mideng import Guard, open_store
from mideng.rpc import IdempotencyInterceptor, Method
from tests.rpc.service import CREATE, compile_proto

#: How long a run takes: long enough that duplicates on the other server arrive during it.
RUN_SECONDS = 0.3


def main(store_url: str, effects: str, proto_dir: str, port_file: str) -> None:
    pb2 = compile_proto(Path(proto_dir))
    guard = Guard(open_store(store_url))
    local = threading.local()

    def create(request: Any, context: grpc.ServicerContext) -> Any:
        time.sleep(RUN_SECONDS)
        if not hasattr(local, "db"):
            local.db = sqlite3.connect(effects, timeout=30, isolation_level=None)
        cursor = local.db.execute(
            "INSERT INTO effects (request_id) VALUES (?)", (request.request_id,)
        )
        return pb2.Order(id=f"order-{cursor.lastrowid}", item=request.item)

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
        interceptors=[IdempotencyInterceptor(guard, {CREATE: Method()})],
    )
    server.add_generic_rpc_handlers((handlers,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    Path(port_file).write_text(str(port))
    server.wait_for_termination()


if __name__ == "__main__":
    main(*sys.argv[1:5])
