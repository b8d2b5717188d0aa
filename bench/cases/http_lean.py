"""The http case's third floor for an ASGI first request: mideng's own parts with no structure
around them.

"a lean layer of mideng's parts" calls, in one coroutine, the same parts the middleware calls
on a first request, nothing else: the request read (``asgi.incoming``: method, path,
headers; ``bind_request_id``: the request id bound), the key's rules (``HttpOptions.plan``),
the body, the fingerprint (``http_digest``, JSON by its meaning), the Guard's ``prepare``,
the memory store's claim and completion called directly (no coroutine), the claim's decision
(``Call.next``), the lease's beat (``renew_store``), the response held back by two closures,
its stored form (``response_bytes``) and the reply (``asgi.messages``). What it leaves
out is the middleware's structure: the Exchange and Capture objects, the driver's and the body's
coroutines, the store's async twins, the policy and retention lookups, metrics and tracing
hooks, and every path but a first request that runs (anything else is handed to the
middleware). So its time over the hand-written minimal layer is what the guarantees' parts
cost, and the middleware's time over it is what its structure costs. A bench floor, not a
contender: it is not a complete middleware.
"""

from __future__ import annotations

from typing import Any

from mideng import Guard
from mideng.context import enter_request_id, leave_request_id
from mideng.core.flow import RUN
from mideng.guard.heartbeat.tasks import renew_store
from mideng.http.asgi import (
    IdempotencyMiddleware,
    bind_request_id,
    guard_asgi,
    incoming,
    messages,
)
from mideng.http.core import RecordKey, StoredResponse
from mideng.http.identity import NO_HEADERS, http_digest
from mideng.http.response_codec import response_bytes
from mideng.stores.memory import MemoryStore


def _body() -> None:  # the Guard learns a body's return type once; this one has none
    return None


class LeanLayer(IdempotencyMiddleware):
    def __init__(self, app: Any) -> None:
        super().__init__(app, guard=Guard(MemoryStore()))
        self.store: MemoryStore = self.options.guard.store  # type: ignore[assignment]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        opts = self.options
        request = incoming(scope)
        request_id = bind_request_id(scope)
        token = tag = None
        if request_id is not None:
            token, tag = enter_request_id(request_id), request_id.encode("latin-1")
        try:
            plan = opts.plan(request)
            message = await receive()
            if not isinstance(plan, RecordKey) or message.get("more_body"):
                await guard_asgi(opts, self.app, scope, _again(message, receive), send, tag)
                return
            body = message.get("body", b"")
            headers = request.headers
            fingerprint = http_digest(
                request.method,
                request.path,
                request.query,
                request.path_bytes,
                headers.get("content-type"),
                body,
                NO_HEADERS,
            )
            guard, store = opts.guard, self.store
            call = guard.prepare(plan.scope, plan.key, _body, None)
            call.fingerprint = fingerprint
            if call.next(store.claim(call)) is not RUN:
                await guard_asgi(opts, self.app, scope, _again(message, receive), send, tag)
                return
            p, ticket = call.policy, call.ticket
            stop = renew_store(p.lease, store, ticket, p.ttl)
            start: dict[str, Any] = {}
            chunks: list[bytes] = []
            given = [False]

            async def replayed() -> Any:
                if given[0]:
                    return await receive()
                given[0] = True
                return message

            async def held(sent: Any) -> None:
                if sent["type"] == "http.response.start":
                    start.update(sent)
                else:
                    chunks.append(sent.get("body", b""))

            try:
                await self.app(scope, replayed, held)
            except BaseException:
                stop()
                store.release(ticket)
                raise
            stop()
            kept = tuple(
                (n.decode("latin-1").lower(), v.decode("latin-1")) for n, v in start["headers"]
            )
            answer = b"".join(chunks)
            store.complete(ticket, response_bytes(start["status"], kept, answer), "json", p.ttl)
            response = StoredResponse(start["status"], kept, answer)
            first, rest = messages(response, tag)
            await send(first)
            await send(rest)
        finally:
            if token is not None:
                leave_request_id(token)


def _again(message: Any, receive: Any) -> Any:
    """``receive`` with ``message`` given back first (read already)."""
    given = [False]

    async def again() -> Any:
        if given[0]:
            return await receive()
        given[0] = True
        return message

    return again
