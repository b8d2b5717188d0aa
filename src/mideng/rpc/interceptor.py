"""The gRPC server interceptors: ``IdempotencyInterceptor`` (``grpc.server``) and
``AsyncIdempotencyInterceptor`` (``grpc.aio.server``).

    server = grpc.server(pool, interceptors=[
        IdempotencyInterceptor(guard, {"/shop.Orders/Create": Method()})])

A method named in ``methods`` runs once per key: the first call runs the handler and its
response message is stored as the bytes its serializer made; a later call with the key gets
those bytes back (with ``idempotent-replayed: true`` in its trailing metadata) without
running the handler. The same key with another request is ``INVALID_ARGUMENT``; a call while
the first is still running gets ``ABORTED`` (or the method's ``in_progress``), which a
client's retry policy retries until the first has finished and the response is replayed. A
handler that raises or aborts gives the key back (the scope's ``on_error`` policy), so the
next call runs it again. Methods not named pass through untouched.

Unary-unary methods only: a streaming method named in ``methods`` is answered
``UNIMPLEMENTED`` saying so (a stream's messages are not one response to store).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc
import grpc.aio

from mideng.core.policy import Policy
from mideng.errors import ConfigurationError, IdempotencyError
from mideng.guard import Guard
from mideng.rpc.methods import (
    MESSAGE_CODEC,
    REPLAYED,
    Method,
    fingerprinted,
    key_of,
    missing,
    refusal,
    scope_of,
    streaming,
)


class _Guarded:
    """One method's rule, scope and policy, and its handler's serializer."""

    def __init__(self, guard: Guard, method: str, rule: Method, handler: Any) -> None:
        self.guard, self.method, self.rule = guard, method, rule
        self.scope = scope_of(method, rule)
        self.policy: Policy = guard.policy(self.scope, codec=MESSAGE_CODEC, **rule.options)
        self.behavior = handler.unary_unary
        serializer = handler.response_serializer
        self.serialize: Callable[[Any], bytes] = serializer if serializer is not None else bytes

    def handler(self, behavior: Any, deserializer: Any) -> grpc.RpcMethodHandler[Any, Any]:
        # The response is bytes already (run, or replayed): sent as they are.
        return grpc.unary_unary_rpc_method_handler(
            behavior, request_deserializer=deserializer, response_serializer=None
        )


class _Sync(_Guarded):
    def __call__(self, request: Any, context: grpc.ServicerContext) -> bytes:
        rule = self.rule
        try:
            key = key_of(rule, request, context.invocation_metadata())
        except IdempotencyError as exc:
            context.abort(*refusal(exc, rule, ""))
        if key is None:
            if rule.required:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, missing(rule))
            return self.serialize(self.behavior(request, context))
        ran: list[bool] = []

        def body() -> bytes:
            ran.append(True)
            return self.serialize(self.behavior(request, context))

        try:
            data = self.guard.run(
                self.scope, key, body, payload=fingerprinted(request), policy=self.policy
            )
        except IdempotencyError as exc:
            context.abort(*refusal(exc, rule, key))
        if not ran:
            context.set_trailing_metadata(((REPLAYED, "true"),))
        return bytes(data)


class _Async(_Guarded):
    async def __call__(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        rule = self.rule
        try:
            key = key_of(rule, request, context.invocation_metadata())
        except IdempotencyError as exc:
            await context.abort(*refusal(exc, rule, ""))
        if key is None:
            if rule.required:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, missing(rule))
            return self.serialize(await self.behavior(request, context))
        ran: list[bool] = []

        async def body() -> bytes:
            ran.append(True)
            return self.serialize(await self.behavior(request, context))

        try:
            data = await self.guard.arun(
                self.scope, key, body, payload=fingerprinted(request), policy=self.policy
            )
        except IdempotencyError as exc:
            await context.abort(*refusal(exc, rule, key))
        if not ran:
            context.set_trailing_metadata(((REPLAYED, "true"),))
        return bytes(data)


def _refusing_stream(
    method: str, handler: Any, asynchronous: bool
) -> grpc.RpcMethodHandler[Any, Any]:
    """The handler a streaming method named in ``methods`` gets: every call refused, saying
    why, instead of running unguarded while the service believes it guarded."""

    def refuse(request: Any, context: Any) -> Any:
        context.abort(grpc.StatusCode.UNIMPLEMENTED, streaming(method))

    async def arefuse(request: Any, context: Any) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, streaming(method))

    body = arefuse if asynchronous else refuse
    build = {
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(handler.request_streaming, handler.response_streaming)]
    return build(body, handler.request_deserializer, handler.response_serializer)


class _Methods:
    """The methods named and what each is wrapped in."""

    def __init__(self, guard: Guard, methods: Mapping[str, Method]) -> None:
        for name in methods:
            if not name.startswith("/") or name.count("/") != 2:
                raise ConfigurationError(f"a method is named /package.Service/Method, not {name!r}")
        self.guard, self.methods = guard, dict(methods)

    def wrap(self, handler: Any, method: str, guarded: type[_Guarded]) -> Any:
        rule = self.methods.get(method)
        if handler is None or rule is None:
            return handler
        if handler.request_streaming or handler.response_streaming:
            return _refusing_stream(method, handler, guarded is _Async)
        wrapped = guarded(self.guard, method, rule, handler)
        return wrapped.handler(wrapped, handler.request_deserializer)


class IdempotencyInterceptor(grpc.ServerInterceptor):
    """For ``grpc.server``: ``methods`` maps a full method name (``/shop.Orders/Create``) to
    how it is guarded (``Method``)."""

    def __init__(self, guard: Guard, methods: Mapping[str, Method]) -> None:
        self.methods = _Methods(guard, methods)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = continuation(handler_call_details)
        method: str = handler_call_details.method
        return self.methods.wrap(handler, method, _Sync)  # type: ignore[no-any-return]


class AsyncIdempotencyInterceptor(grpc.aio.ServerInterceptor):
    """For ``grpc.aio.server``: the same, with ``async def`` handlers."""

    def __init__(self, guard: Guard, methods: Mapping[str, Method]) -> None:
        self.methods = _Methods(guard, methods)

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(handler_call_details)
        method: str = handler_call_details.method
        return self.methods.wrap(handler, method, _Async)  # type: ignore[no-any-return]
