"""A real WSGI middleware (Flask and any WSGI application), over the shared HTTP core.

    app.wsgi_app = IdempotencyMiddleware(app.wsgi_app, guard=guard, required=False)

A guarded request's body is read (up to ``max_body``) and handed to the application again as a
fresh ``wsgi.input``. The application's iterable is consumed, and closed, before anything is
sent, so the stored response is always the whole one. An event stream, or a body past
``max_response``, is passed through as it comes and its key released.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from mideng.context import enter_request_id, leave_request_id
from mideng.guard import Guard
from mideng.http.core import REQUEST_ID_HEADER, HttpOptions, Incoming, StoredResponse
from mideng.http.exchange import Captured, run
from mideng.http.headers import Headers
from mideng.http.identity import text_bytes
from mideng.http.request_id import accept_request_id

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

#: Set in the environ by whichever layer bound the request id first; inner layers reuse it.
ENVIRON_REQUEST_ID = "mideng.request_id"
_CHUNK = 64 * 1024


def wsgi_bytes(value: str) -> bytes:
    """The bytes a PEP 3333 string carries, one latin-1 character each."""
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError:  # a server that passed decoded text, against PEP 3333
        return text_bytes(value)


def path_bytes(environ: WSGIEnvironment) -> bytes:
    return wsgi_bytes(environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", ""))


def incoming(environ: WSGIEnvironment) -> Incoming:
    pairs = [
        (name[5:].replace("_", "-"), value)
        for name, value in environ.items()
        if name.startswith("HTTP_") and isinstance(value, str)
    ]
    for name in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(name):
            pairs.append((name.replace("_", "-"), environ[name]))
    raw = path_bytes(environ)
    # Routes and principals read the path as UTF-8 text; the fingerprint keeps the bytes.
    return Incoming(
        environ.get("REQUEST_METHOD", "GET"),
        raw.decode("utf-8", "replace"),
        environ.get("QUERY_STRING", ""),
        Headers(pairs),
        environ,
        raw,
    )


# Looked up, not made: HTTPStatus(status) is an enum call per response.
_STATUS_LINES = {int(s): f"{int(s)} {s.phrase}" for s in HTTPStatus}


def status_line(status: int) -> str:
    line = _STATUS_LINES.get(status)
    return f"{status} Unknown" if line is None else line


def respond(
    start_response: StartResponse,
    response: StoredResponse,
    added: tuple[tuple[str, str], ...] = (),
) -> list[bytes]:
    """Start ``response`` with the headers ``added`` set (replacing its own of those names)."""
    if added:
        names = dict(added)
        headers = [h for h in response.headers if h[0] not in names]
        headers += added
    else:
        headers = list(response.headers)
    start_response(status_line(response.status), headers)
    return [response.body]


# -- request id ------------------------------------------------------------------------------
def bind_request_id(environ: WSGIEnvironment) -> str | None:
    """The id this layer binds, or None when an outer layer already did."""
    if ENVIRON_REQUEST_ID in environ:
        return None
    request_id = accept_request_id(environ.get("HTTP_X_REQUEST_ID"))
    environ[ENVIRON_REQUEST_ID] = request_id
    return request_id


def with_request_id(start_response: StartResponse, request_id: str) -> StartResponse:
    def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        for name, _ in headers:  # a loop, not any() over a generator: once per response
            if name.lower() == REQUEST_ID_HEADER:
                break
        else:
            headers = [*headers, (REQUEST_ID_HEADER, request_id)]
        return start_response(status, headers, exc_info)

    return start


def _with_bound_id(
    app: WSGIApplication, environ: WSGIEnvironment, start_response: StartResponse
) -> Iterable[bytes]:
    # A body the app generates lazily, after this returns, runs outside the id's scope.
    request_id = bind_request_id(environ)
    if request_id is None:
        return app(environ, start_response)
    token = enter_request_id(request_id)  # request_id_scope without a generator per request
    try:
        return app(environ, with_request_id(start_response, request_id))
    finally:
        leave_request_id(token)


class RequestIdMiddleware:
    """Accept a well-formed X-Request-Id or make one; bind it for the request; echo it."""

    def __init__(self, app: WSGIApplication) -> None:
        self.app = app

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        return _with_bound_id(self.app, environ, start_response)


# -- capturing the application's response ----------------------------------------------------
def read_body(environ: WSGIEnvironment, limit: int) -> bytes | None:
    """The whole request body, or None when it exceeds ``limit`` bytes."""
    stream = environ.get("wsgi.input")
    if stream is None:
        return b""
    try:
        length = int(environ.get("CONTENT_LENGTH") or "")
    except ValueError:
        length = -1
    if length >= 0:
        return None if length > limit else stream.read(length)
    if not environ.get("wsgi.input_terminated"):
        return b""  # PEP 3333: without a length there is no body to read
    chunks: list[bytes] = []
    size = 0
    while chunk := stream.read(_CHUNK):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


class _Rest:
    """What was buffered plus the rest of the app's iterable, closed when the server closes."""

    def __init__(self, head: list[bytes], tail: Iterator[bytes], result: Iterable[bytes]):
        self.head, self.tail, self.result = head, tail, result

    def __iter__(self) -> Iterator[bytes]:
        yield from self.head
        yield from self.tail

    def close(self) -> None:
        close = getattr(self.result, "close", None)
        if close is not None:
            close()


class Capture:
    """Runs the application and collects its whole response (or gives up on a stream)."""

    def __init__(self, app: WSGIApplication, environ: WSGIEnvironment, limit: int) -> None:
        self.app, self.environ, self.limit = app, environ, limit
        self.status: str | None = None
        self.headers: list[tuple[str, str]] = []
        self.chunks: list[bytes] = []
        self.size = 0
        self.passed: Iterable[bytes] | None = None
        self.stream = False  # an event stream, seen when start_response is called
        self.close_error: Exception | None = None  # raised by close() after a whole response

    def start_response(
        self, status: str, headers: list[tuple[str, str]], exc_info: Any = None
    ) -> Callable[[bytes], object]:
        # Nothing was sent yet, so a second call (an error page) simply replaces the first.
        self.status, self.headers = status, list(headers)
        self.stream = False
        for n, v in self.headers:
            if n.lower() == "content-type" and v.lower().startswith("text/event-stream"):
                self.stream = True
        return self.write

    def write(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.size += len(chunk)

    def _streaming(self) -> bool:
        return self.stream or self.size > self.limit

    def __call__(self) -> Captured:
        result = self.app(self.environ, self.start_response)
        iterator = iter(result)
        try:
            while not self._streaming():
                chunk = next(iterator, None)
                if chunk is None:
                    break
                self.write(chunk)
        except BaseException:
            _close(result)
            raise
        if self._streaming():
            self.passed = _Rest(self.chunks, iterator, result)
            return None
        try:
            _close(result)
        except Exception as exc:
            # The response is whole: an after-response hook failing in close() does not undo
            # it. As without this layer, the client gets it (stored, so a retry replays it
            # rather than running the body again) and the server gets the error after it.
            self.close_error = exc
        if self.status is None:
            raise RuntimeError("the application returned without calling start_response")
        headers = tuple([(n.lower(), v) for n, v in self.headers])
        chunks = self.chunks
        body = chunks[0] if len(chunks) == 1 and type(chunks[0]) is bytes else b"".join(chunks)
        return StoredResponse(int(self.status.split(" ", 1)[0]), headers, body)


def _close(result: Iterable[bytes]) -> None:
    close = getattr(result, "close", None)
    if close is not None:
        close()


class _CloseRaises:
    """A captured response, sent whole, whose close() raises what the application's raised."""

    def __init__(self, body: list[bytes], error: Exception) -> None:
        self.body, self.error = body, error

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.body)

    def close(self) -> None:
        raise self.error


# -- the idempotency middleware --------------------------------------------------------------
class IdempotencyMiddleware:
    """Idempotency-Key handling for a WSGI app; same options as the ASGI middleware."""

    def __init__(self, app: WSGIApplication, guard: Guard, **options: Any) -> None:
        self.app = app
        self.options = HttpOptions.build(guard, options)

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if self.options.request_id:
            return _with_bound_id(self._guarded, environ, start_response)
        return self._guarded(environ, start_response)

    def _guarded(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        opts = self.options
        request = incoming(environ)
        plan = opts.plan(request)
        if plan is None:
            return self.app(environ, start_response)
        if isinstance(plan, StoredResponse):
            return respond(start_response, plan)
        try:
            body = read_body(environ, opts.max_body)
        except Exception:  # the server's input stream failed (a client gone mid-body)
            # Nothing was claimed: the client's resend starts afresh. A 400, as Django and
            # Werkzeug answer a body they could not read, rather than a 500 from the server.
            return respond(start_response, opts.unreadable())
        if body is None:
            return respond(start_response, opts.too_large())
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        capture = Capture(self.app, environ, opts.max_response)
        reply = run(opts, plan, request, body, capture)
        if reply.response is None:
            assert capture.status is not None
            assert capture.passed is not None
            start_response(capture.status, capture.headers)
            return capture.passed
        sent = respond(start_response, reply.response, reply.added)
        if capture.close_error is not None:
            return _CloseRaises(sent, capture.close_error)
        return sent
