"""A server interceptor outside the idempotency one: the status each call ended with, so a
test can wait for a call to have been refused (no sleep standing in for it)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import grpc.aio


class Codes:
    def __init__(self) -> None:
        self.seen: Counter[grpc.StatusCode] = Counter()
        self.changed = threading.Condition()

    def add(self, code: grpc.StatusCode) -> None:
        with self.changed:
            self.seen[code] += 1
            self.changed.notify_all()

    def wait_ended(self, count: int) -> None:
        """Until ``count`` calls ended on the server, whatever their status."""
        with self.changed:
            assert self.changed.wait_for(lambda: self.seen.total() >= count, 30), self.seen

    def wait_for(self, code: grpc.StatusCode, count: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.seen[code] >= count, 30), self.seen


class CodesInterceptor(grpc.ServerInterceptor):
    def __init__(self, codes: Codes) -> None:
        self.codes = codes

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        inner, codes = handler.unary_unary, self.codes

        def behavior(request: Any, context: grpc.ServicerContext) -> Any:
            try:
                answer = inner(request, context)
            except Exception:
                codes.add(context.code() or grpc.StatusCode.UNKNOWN)  # type: ignore[attr-defined]
                raise
            codes.add(grpc.StatusCode.OK)
            return answer

        return grpc.unary_unary_rpc_method_handler(
            behavior, handler.request_deserializer, handler.response_serializer
        )


class AsyncCodesInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, codes: Codes) -> None:
        self.codes = codes

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            return handler
        inner, codes = handler.unary_unary, self.codes

        async def behavior(request: Any, context: Any) -> Any:
            try:
                answer = await inner(request, context)
            except BaseException:
                codes.add(context.code() or grpc.StatusCode.UNKNOWN)
                raise
            codes.add(grpc.StatusCode.OK)
            return answer

        return grpc.unary_unary_rpc_method_handler(
            behavior, handler.request_deserializer, handler.response_serializer
        )
