"""The drivers of the HTTP core: run one guarded request through the Guard.

``run`` is the blocking drive (WSGI, Django, Flask), ``arun`` the awaited one (ASGI); both
carry out one procedure (``_guarded_reply``), a coroutine that awaits the Guard's drive it is
handed: ``arun`` awaits it with the Guard's ``adrive``, ``run`` carries it out with
``effects.completed`` and the blocking ``drive`` (see ``mideng.core.effects``). The guarded
body calls the integration's ``downstream``, which runs the application and returns its
captured response. A response that may be stored is the body's result; any other makes
the body raise ``NotStored``, so the Guard releases the claim, and carries what the client
gets instead.

The body's result is the response's fields (``mideng.http.response_codec.Form``), which the HTTP
policy's codec writes as the JSON of its stored form (``stored_form``) without the encoder's
walk; a replay gets the plain JSON back as the C scanner reads it, checked and rebuilt here
(``from_stored``) rather than by the codec's walk over a declared type. The bytes are those a
``StoredResponse`` is stored as, so records of either kind replay alike.
"""

from __future__ import annotations

import asyncio
import binascii
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from mideng.core.effects import completed
from mideng.core.flow import Call
from mideng.errors import (
    CodecError,
    IdempotencyError,
    PayloadMismatchError,
    StoreUnavailableError,
)
from mideng.http.core import (
    NOT_REPLAYED,
    REPLAYED_HEADER,
    HttpOptions,
    Incoming,
    RecordKey,
    StoredResponse,
)
from mideng.http.identity import V2
from mideng.http.response_codec import Form
from mideng.observability import logs, observers


@dataclass(slots=True)  # not frozen: made on every request (see mideng.http.core.Incoming)
class Reply:
    """What to send. ``own``: the application's own response, to be sent with the headers
    ``added`` set (an integration holding the native response object sends that);
    ``response`` None: it went out already."""

    response: StoredResponse | None
    own: bool = False
    added: tuple[tuple[str, str], ...] = ()


class NotStored(Exception):
    """Raised by the guarded body so the Guard releases the claim; carries what to send."""

    def __init__(self, reply: Reply) -> None:
        super().__init__("response not stored")
        self.reply = reply


def storable_headers(headers: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The headers a replay repeats: no hop-by-hop field (nor one ``connection`` names), no
    field written fresh for every response."""
    kept = []
    connection = False
    for h in headers:
        if h[0] not in NOT_REPLAYED:
            kept.append(h)
        elif h[0] == "connection":
            connection = True
    if not connection:
        return tuple(kept)
    named = {t.strip().lower() for n, v in headers if n == "connection" for t in v.split(",")}
    return tuple([h for h in kept if h[0] not in named])


def storable(response: StoredResponse) -> StoredResponse:
    return StoredResponse(response.status, storable_headers(response.headers), response.body)


def stored_form(response: StoredResponse) -> dict[str, Any]:
    """What is stored for a response: the JSON codec's spelling of ``storable(response)``
    (fields in order, the body in base64), as plain data the C encoder writes by itself."""
    return {
        "status": response.status,
        "headers": storable_headers(response.headers),
        "body": binascii.b2a_base64(response.body, newline=False).decode("ascii"),
    }


def from_stored(plain: Any) -> StoredResponse:
    """The response a record holds, from its decoded JSON; CodecError when it isn't one."""
    if type(plain) is StoredResponse:  # a codec that rebuilds objects (pickle) made it
        return plain
    try:
        status, listed, body = plain["status"], plain["headers"], plain["body"]
        if type(status) is not int or type(listed) is not list or type(body) is not str:
            raise TypeError("status, headers or body of the wrong type")
        headers = tuple([(n, v) for n, v in listed])  # two items each, else a ValueError
        for n, v in headers:
            if type(n) is not str or type(v) is not str:
                raise TypeError("a header that is not two strings")
        return StoredResponse(status, headers, binascii.a2b_base64(body))
    except (TypeError, ValueError, KeyError) as exc:  # binascii.Error is a ValueError
        raise CodecError(f"stored result is not a stored response: {exc}") from exc


def replayed(
    stored: StoredResponse,
    opts: HttpOptions,
    retention: tuple[tuple[str, str], ...] | None = None,
) -> StoredResponse:
    """What a replay of ``stored`` sends; ``retention``: ``opts.retention()``, when the caller
    looked it up already."""
    extra = [(REPLAYED_HEADER, "true"), *(opts.retention() if retention is None else retention)]
    if _has_length(stored.status):
        extra.append(("content-length", str(len(stored.body))))
    return stored.with_headers(extra)


def _has_length(status: int) -> bool:
    return status not in (204, 304) and status >= 200


def replay_of(plain: Any, opts: HttpOptions) -> StoredResponse:
    """What a replay sends for the stored response ``plain`` (its decoded JSON)."""
    return replayed(from_stored(plain), opts)


Captured = StoredResponse | None  # None: too big or a stream; the app's own response went out

# A store's I/O errors, which it should have raised as StoreUnavailableError (a custom store or
# a wrapper may let its driver's through). asyncio.TimeoutError is TimeoutError from 3.11 on.
STORE_IO = (OSError, asyncio.TimeoutError)


def unwrapped(exc: Exception) -> StoreUnavailableError:
    """A store's own I/O error, let through unwrapped: the store is down (a 503, fail-closed),
    not an error of the request (a 500); logged."""
    logs.store_io_failed(exc)
    return StoreUnavailableError(str(exc))


class Exchange:
    """One guarded request's state: did the body run here, and what did the app answer."""

    __slots__ = ("downstream", "opts", "original", "passed", "policy", "ran", "retention")
    # What runs the application and returns its captured response: a blocking callable
    # (``run``'s), or a coroutine function (``arun``'s).
    downstream: Any

    def __init__(self, opts: HttpOptions, downstream: Callable[[], Any]) -> None:
        self.opts = opts
        self.downstream = downstream
        self.ran = False
        self.original: StoredResponse | None = None
        self.passed = False  # the application's response went out as it came (not kept)
        # The HTTP policy the call runs under, and the Idempotency-Retention header it
        # advertises.
        _, self.policy, self.retention = opts.current()

    async def drive(self, target: RecordKey, fingerprint: str) -> Any:
        """The Guard's blocking drive of the guarded body, claimed with ``fingerprint``: over
        once awaited, as ``effects.completed`` needs."""
        call = self._call(target, fingerprint, _produce)
        return self.opts.guard.drive(call, _produce, (self,), {})

    def adrive(self, target: RecordKey, fingerprint: str) -> Awaitable[Any]:
        """``drive`` on the event loop, the body awaited: the Guard's own coroutine."""
        call = self._call(target, fingerprint, _aproduce)
        return self.opts.guard.adrive(call, _aproduce, (self,), {})

    def _call(self, target: RecordKey, fingerprint: str, body: Callable[..., Any]) -> Call:
        # Prepared without a payload: the request's fingerprint is the HTTP layer's own.
        call = self.opts.guard.prepare(target.scope, target.key, body, None, self.policy)
        call.fingerprint = fingerprint
        return call

    def keep(self, captured: Captured) -> Any:
        if captured is None:
            logs.response_unguarded(self.opts.max_response)
            self.passed = True
            raise NotStored(Reply(None, own=True))
        self.original = captured
        if not self.opts.store_status(captured.status):
            raise NotStored(Reply(captured, own=True))
        # Encoded by the policy's codec (mideng.http.response_codec): the stored form's JSON bytes.
        return Form((captured.status, storable_headers(captured.headers), captured.body))

    def reply(self, stored: Any) -> Reply:
        """What to send after the Guard returned ``stored`` (a stored form, or the plain data
        a replay decoded)."""
        if self.ran and self.original is not None:
            return Reply(self.original, True, self.retention)
        try:
            return Reply(replayed(from_stored(stored), self.opts, self.retention))
        except CodecError as exc:
            return Reply(self.opts.problem_for(exc))

    def recover_or_raise(self, exc: Exception) -> Reply:
        """``recover``, re-raising ``exc`` where that says to (called in its ``except``)."""
        reply = self.recover(exc)
        if reply is None:
            raise exc
        return reply

    def recover(self, exc: Exception) -> Reply | None:
        """The reply for an exception out of the Guard; None: re-raise (the app's own error)."""
        if isinstance(exc, NotStored):
            return exc.reply
        if self.ran:
            if self.passed:
                # The app's response went out as it came (a stream, too big) and releasing the
                # key then failed with an error the store did not wrap: the response stands, as
                # it does for a release's StoreUnavailableError, rather than an error raised to
                # the server after it (or, over WSGI, sent in place of it).
                logs.response_unstored(exc)
                return Reply(None, own=True)
            if self.original is None:
                return None  # raised by the app itself, even an IdempotencyError of its own
            # The body ran but its result could not be stored (store down, lease lost): the
            # client still gets what was done rather than an error that invites a second run.
            logs.response_unstored(exc)
            return Reply(self.original, own=True)
        if isinstance(exc, IdempotencyError):
            return Reply(self.opts.problem_for(exc))
        if isinstance(exc, STORE_IO):  # nothing ran, so an I/O error can only be the store's
            return Reply(self.opts.problem_for(unwrapped(exc)))
        return None


def _sent(reply: Reply) -> Reply:
    """The reply, counted in mideng_http_responses_total while metrics are on."""
    sent = reply.response
    if sent is not None and observers.metrics is not None:
        observers.metrics.http_reply(
            sent.status, any(n == REPLAYED_HEADER for n, _ in sent.headers)
        )
    return reply


# The guarded bodies, declared Any so a replay hands back the decoded JSON as it is (see
# from_stored); module-level, so the Guard's per-function cache holds two entries however many
# requests pass.
def _produce(exchange: Exchange) -> Any:
    exchange.ran = True
    return exchange.keep(exchange.downstream())


async def _aproduce(exchange: Exchange) -> Any:
    exchange.ran = True
    return exchange.keep(await exchange.downstream())


# The Guard's drive of the guarded body under a record key, claimed with a fingerprint.
Drive = Callable[[RecordKey, str], Awaitable[Any]]


async def _guarded_reply(
    exchange: Exchange, target: RecordKey, request: Incoming, body: bytes, drive: Drive
) -> Reply:
    """The reply to one guarded request, written once for ``run`` and ``arun``: ``drive`` is
    the Guard's (``Exchange.drive`` or ``adrive``); what it means is the Exchange's: ``keep``
    (what the app answered), ``reply`` (what to send after the Guard), ``recover`` (what an
    exception out of it means).

    The call is claimed with the request's fingerprint, version 2 (``HttpOptions.digest``). A
    record stored before version 2 carries version 1, which the Guard reports as a mismatch:
    when version 1 of this request is the record's, the call is made again with it
    (``legacy``), and the record answers as it always did (a replay, in progress, ...)."""
    fingerprint = exchange.opts.digest(request, body)
    try:
        try:
            stored = await drive(target, fingerprint)
        except PayloadMismatchError as exc:
            if (old := legacy(exc, exchange, request, body)) is None:
                raise
            stored = await drive(target, old)
    except Exception as exc:
        return _sent(exchange.recover_or_raise(exc))
    return _sent(exchange.reply(stored))


def run(
    opts: HttpOptions,
    target: RecordKey,
    request: Incoming,
    body: bytes,
    downstream: Callable[[], Captured],
) -> Reply:
    """One guarded request, blocking (WSGI, Django, Flask): ``downstream`` runs the
    application and returns its captured response."""
    exchange = Exchange(opts, downstream)
    return completed(_guarded_reply(exchange, target, request, body, exchange.drive))


def arun(
    opts: HttpOptions,
    target: RecordKey,
    request: Incoming,
    body: bytes,
    downstream: Callable[[], Awaitable[Captured]],
) -> Awaitable[Reply]:
    """``run`` on the event loop (ASGI): ``downstream`` is awaited."""
    exchange = Exchange(opts, downstream)
    return _guarded_reply(exchange, target, request, body, exchange.adrive)


def legacy(
    exc: PayloadMismatchError, exchange: Exchange, request: Incoming, body: bytes
) -> str | None:
    """The version-1 fingerprint to claim again with, when the mismatch is a record stored
    before version 2 whose fingerprint is this request's; else None (a real mismatch, or one
    the application raised itself)."""
    stored = None if exc.record is None else exc.record.fingerprint
    if exchange.ran or stored is None or stored.startswith(V2):
        return None
    old = exchange.opts.fingerprint(request, body)
    return old if old == stored else None
