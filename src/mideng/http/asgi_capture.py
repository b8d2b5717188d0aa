"""Capturing an ASGI application's response: what the idempotency middleware stores.

The application reads the request body already read (then the client's own messages); its
response is held back until complete. An event stream, or a body past the limit, is passed
through as it comes instead (and its key released).
"""

from __future__ import annotations

from mideng.http.asgi_ids import ASGIApp, Message, Receive, Scope, Send, tagged
from mideng.http.core import StoredResponse


# -- capturing the application's response ----------------------------------------------------
class Disconnected(Exception):
    """The client disconnected before its request body arrived."""


async def read_body(receive: Receive, limit: int, message: Message | None = None) -> bytes | None:
    """The whole request body, or None as soon as it exceeds ``limit`` bytes; ``message``: the
    first message, when the caller received it already."""
    chunks: list[bytes] = []
    size = 0
    while True:
        if message is None:
            message = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
        message = None


# Each response field name's bytes as Capture stores it (decoded, lower case).
_LOWER: dict[bytes, str] = {}
_LOWER_KEPT = 256


class Capture:
    """Runs the application and holds its response back until it is complete.

    The application reads the body already read (then the client's own messages). An event
    stream, or a body past ``limit`` bytes, switches to passing the response through as it
    comes; ``response`` (which runs it) then gives none to keep, so the key is released rather
    than half-stored. Made for every guarded request, so it is one object: what the application
    needs is made only when it runs (a replay never does).
    """

    __slots__ = (
        "app",
        "body",
        "chunks",
        "complete",
        "downstream",
        "headers",
        "late_error",
        "limit",
        "passing",
        "scope",
        "size",
        "start",
        "tag",
        "upstream",
    )

    def __init__(
        self,
        app: ASGIApp,
        scope: Scope,
        body: bytes | None,
        downstream: Receive,
        upstream: Send,
        limit: int,
        tag: bytes | None = None,
    ) -> None:
        self.app = app
        self.scope = scope
        self.body = body  # None once handed over
        self.downstream = downstream
        self.upstream = upstream
        self.limit = limit
        self.tag = tag  # the request id, for a response passed through
        self.start: Message | None = None
        self.headers: tuple[tuple[str, str], ...] = ()  # the start's, decoded
        self.chunks: list[bytes] = []
        self.size = 0
        self.complete = False
        self.passing = False
        self.late_error: BaseException | None = None

    async def response(self) -> StoredResponse | None:
        """Run the application; its complete response, or None when it was passed through as
        it came (an event stream, or a body past the limit)."""
        try:
            await self.app(self.scope, self.receive, self.send)
        except BaseException as exc:
            if not self.complete or self.passing or self.start is None:
                raise
            # Raised after a complete response (a failing background task, or the request's
            # task cancelled while one runs): the response stands, as it would without the
            # capture, and is stored, since the body has run; the error is raised once the
            # response is sent. Released instead, a cancelled request's retry would run the
            # body a second time.
            self.late_error = exc
        if self.passing:
            return None
        if self.start is None or not self.complete:
            raise RuntimeError("the application returned without a complete response")
        return StoredResponse(int(self.start["status"]), self.headers, b"".join(self.chunks))

    async def receive(self) -> Message:
        body = self.body
        if body is not None:
            self.body = None
            return {"type": "http.request", "body": body, "more_body": False}
        return await self.downstream()

    async def send(self, message: Message) -> None:
        if self.passing:
            await self.upstream(message)
        elif message["type"] == "http.response.start":
            if self.start is not None or self.chunks:
                # A server refuses a second start, or one after body: so does the capture,
                # rather than keep a response the application never validly sent.
                raise RuntimeError("the application sent a response start after a start or body")
            self.start = message
            # Decoded as they will be stored, and looked at for an event stream, in one pass.
            headers = []
            stream = False
            for k, v in message.get("headers", ()):
                # A response's field names are a few, over and over (a bytearray is not kept).
                name = _LOWER.get(k) if type(k) is bytes else None
                if name is None:
                    name = k.decode("latin-1").lower()
                    if type(k) is bytes and len(_LOWER) < _LOWER_KEPT:
                        _LOWER[k] = name
                value = v.decode("latin-1")
                if name == "content-type" and value.lower().startswith("text/event-stream"):
                    stream = True
                headers.append((name, value))
            self.headers = tuple(headers)
            if stream:
                await self._pass_through(None)
        elif message["type"] == "http.response.body" and not self.complete:
            chunk = message.get("body", b"")
            more = bool(message.get("more_body", False))
            self.chunks.append(chunk)
            self.size += len(chunk)
            if self.size > self.limit:
                await self._pass_through(more)
            elif not more:
                self.complete = True

    async def _pass_through(self, more: bool | None) -> None:
        start = self.start
        if start is None:  # an app's broken protocol: the incomplete response's error
            raise RuntimeError("the application sent a response body before its start")
        self.passing = True
        await self.upstream(start if self.tag is None else tagged(start, self.tag))
        if more is not None:
            await self.upstream(
                {"type": "http.response.body", "body": b"".join(self.chunks), "more_body": more}
            )
        self.chunks = []


def capturable(scope: Scope) -> None:
    """Hide response extensions (pathsend, trailers, ...) a capture could not store."""
    extensions = scope.get("extensions")
    if extensions:
        scope["extensions"] = {
            k: v for k, v in extensions.items() if not k.startswith("http.response.")
        }
