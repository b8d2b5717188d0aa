"""gRPC: server interceptors that run a unary-unary method once per request id (AIP-155's
``request_id`` field, or a metadata entry), replaying the stored response message to a
retry. ``pip install 'mideng[grpc]'``. The package is ``mideng.rpc``, not ``grpc``: inside
it, ``import grpc`` is grpcio."""

from mideng.rpc.interceptor import AsyncIdempotencyInterceptor, IdempotencyInterceptor
from mideng.rpc.methods import REPLAYED, Method

__all__ = ["REPLAYED", "AsyncIdempotencyInterceptor", "IdempotencyInterceptor", "Method"]
