"""The HTTP idempotency core, shared by the ASGI, WSGI and Django integrations.

Framework-free: each integration turns its request into an ``Incoming``, asks ``plan`` whether
the request is guarded (and under which scope and key), reads the body within ``max_body``, and
hands ``exchange.run`` / ``exchange.arun`` a ``downstream`` callable that runs the application
and returns its captured response. The rest is the Guard's: the captured response is the
guarded body's result (a ``StoredResponse`` stored with the JSON codec) under scope
``http:<principal>`` and the Idempotency-Key as the key; the fingerprint is method + path +
query + body (+ chosen headers).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from mideng.context import get_request_id
from mideng.core.keys import MAX_KEY_LENGTH, MAX_SCOPE_LENGTH, check_scope
from mideng.core.policy import Policy
from mideng.errors import (
    ConfigurationError,
    IdempotencyError,
    InProgressError,
    InvalidKeyError,
    PayloadMismatchError,
    StoreUnavailableError,
    UnresolvedError,
)
from mideng.guard import Guard
from mideng.http import problem as p
from mideng.http.headers import Headers
from mideng.http.identity import (
    NO_HEADERS,
    Form,
    body_digest,
    canonical,
    exact,
    http_digest,
    http_fingerprint,
    path_form,
    principal_scope,
)
from mideng.http.response_codec import RESPONSE_CODEC
from mideng.http.sfv import parse_key

KEY_HEADER = "idempotency-key"
REPLAYED_HEADER = "idempotent-replayed"
RETENTION_HEADER = "idempotency-retention"
REQUEST_ID_HEADER = "x-request-id"
DEFAULT_METHODS = ("POST", "PATCH")
MiB = 1 << 20

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
# Written fresh for every response (or, for cookies, tied to a session that may have moved on),
# so a replay never repeats them; content-length is recomputed from the stored body.
NOT_REPLAYED = HOP_BY_HOP | {
    "date",
    "server",
    "set-cookie",
    "content-length",
    REQUEST_ID_HEADER,
    REPLAYED_HEADER,
    RETENTION_HEADER,
}


# The per-request value types here and in mideng.http.exchange are slotted, not frozen: a frozen
# dataclass sets each field through object.__setattr__, four times the cost of a plain one, and
# a request makes several. Treat them as read-only; they hash by value as the frozen ones did.
@dataclass(slots=True, unsafe_hash=True)
class Incoming:
    """A request as the core sees it; ``raw`` is the framework's own object for callables.

    ``path`` is text for routes and principals (undecodable bytes replaced); ``path_bytes``,
    where the integration has them, the path's exact bytes, which the fingerprint keeps.
    """

    method: str
    path: str
    query: str
    headers: Headers
    raw: Any = None
    path_bytes: bytes | None = None


Principal = Callable[[Incoming], "str | None"]


@dataclass(slots=True, unsafe_hash=True)
class StoredResponse:
    """What a replay sends back: status, headers and body exactly as first produced."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for n, v in self.headers if n == name), None)

    def with_headers(self, extra: Sequence[tuple[str, str]]) -> StoredResponse:
        names = {n for n, _ in extra}
        kept = tuple([h for h in self.headers if h[0] not in names])
        return StoredResponse(self.status, kept + tuple(extra), self.body)


@dataclass(slots=True, unsafe_hash=True)
class RecordKey:
    """The record one request maps to: the principal's scope and the Idempotency-Key."""

    scope: str
    key: str


@dataclass(frozen=True)
class Route:
    """Per-route settings. ``path``: exact, a shell pattern (``/orders/*``) or a regex."""

    path: str | re.Pattern[str]
    methods: Collection[str] | None = None
    required: bool | None = None
    guarded: bool = True

    def matches(self, path: str) -> bool:
        if isinstance(self.path, re.Pattern):
            return self.path.fullmatch(path) is not None
        if any(c in self.path for c in "*?["):
            return fnmatchcase(path, self.path)
        return path == self.path


def problem_response(
    kind: p.Kind, detail: str, retry_after: float | None = None, base: str = p.PROBLEM_BASE
) -> StoredResponse:
    prob = p.Problem(kind, detail, retry_after, get_request_id())
    body = prob.body(base)
    return StoredResponse(prob.status, prob.headers(body), body)


#: Statuses that ask for the request again, later (408, 425, 429) or at another URI with the
#: same method and body (307, 308: nothing was done here, and a client that follows sends the
#: key with another path): the default rule never stores them (nor any 5xx).
RETRY_LATER = frozenset({307, 308, 408, 425, 429})


def storable_status(status: int) -> bool:
    """Default: store final answers; 5xx and statuses asking for the request again (later, or
    elsewhere) release the key."""
    return status < 500 and status not in RETRY_LATER


def _header(value: str | None) -> Form | None:
    return None if value is None else exact(value)


@dataclass(frozen=True)
class HttpOptions:
    """Everything an integration is configured with; validated once, at start-up."""

    guard: Guard
    required: bool = False
    principal: Principal | None = None
    methods: Collection[str] = DEFAULT_METHODS
    routes: Sequence[Route] = ()
    fingerprint_headers: Sequence[str] = ()
    in_progress: str = "raise"
    wait_timeout: float | None = None
    store_status: Callable[[int], bool] = storable_status
    max_body: int = MiB
    max_response: int = MiB
    lenient: bool = True
    scope_prefix: str = "http"
    problem_base: str = p.PROBLEM_BASE
    request_id: bool = True
    _methods: frozenset[str] = field(init=False, repr=False)
    _anonymous: str = field(init=False, repr=False)  # the scope of requests without a principal
    # (the Guard's policy for scope_prefix, the HTTP policy made from it): rebuilt only when
    # the Guard's policy object changes, i.e. after configure_scope().
    # The retention header made from that policy's ttl rides along.
    _policy: list[tuple[Policy, Policy, tuple[tuple[str, str], ...]]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if not isinstance(self.guard, Guard):
            raise ConfigurationError(f"guard must be a mideng.Guard, got {self.guard!r}")
        if self.in_progress not in ("raise", "wait"):
            raise ConfigurationError(f"in_progress must be 'raise' or 'wait': {self.in_progress!r}")
        for name in ("max_body", "max_response"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigurationError(f"{name} must be a whole number of bytes: {value!r}")
        if (
            not isinstance(self.scope_prefix, str)
            or not self.scope_prefix
            or ":" in self.scope_prefix
            or len(self.scope_prefix) > MAX_SCOPE_LENGTH // 2
        ):
            raise ConfigurationError(
                f"scope_prefix must be a short name without ':': {self.scope_prefix!r}"
            )
        try:  # the Guard's own scope rule, at start-up: else every request would be a 400
            check_scope(f"{self.scope_prefix}:-")
        except InvalidKeyError as exc:
            raise ConfigurationError(f"scope_prefix {self.scope_prefix!r}: {exc}") from None
        object.__setattr__(self, "_methods", frozenset(m.upper() for m in self.methods))
        object.__setattr__(self, "_anonymous", principal_scope(self.scope_prefix, None))
        object.__setattr__(self, "_policy", [])
        object.__setattr__(
            self, "fingerprint_headers", tuple(h.lower() for h in self.fingerprint_headers)
        )
        self.policy()  # a bad wait_timeout fails here, not on the first request

    @classmethod
    def build(cls, guard: Guard, options: dict[str, Any]) -> HttpOptions:
        try:
            return cls(guard=guard, **options)
        except TypeError as exc:
            raise ConfigurationError(f"{exc}; see mideng.http.core.HttpOptions") from exc

    def policy(self) -> Policy:
        """The policy of scope ``http`` (configure it on the Guard) with the HTTP rules on top:
        failures always release, results are JSON (mideng.http.response_codec writes a response's),
        in-progress is this layer's choice."""
        return self.current()[1]

    def current(self) -> tuple[Policy, Policy, tuple[tuple[str, str], ...]]:
        """The Guard's policy of ``scope_prefix``, ``policy()`` made from it and ``retention()``
        made from that, in one look (a guarded request needs the last two)."""
        # Guard.policy hands back the scope's own policy object while nothing reconfigured it
        # (a Policy is frozen: configure_scope makes a new one), so that object is the version
        # the cached derivation was made from.
        base = self.guard.policy(self.scope_prefix)
        cached = self._policy
        if cached and cached[0][0] is base:
            return cached[0]
        extra: dict[str, Any] = {}
        if self.wait_timeout is not None:
            extra["wait_timeout"] = self.wait_timeout
        policy = base.merged(
            on_error="release", codec=RESPONSE_CODEC, in_progress=self.in_progress, **extra
        )
        ttl = policy.ttl
        retention = () if ttl is None else ((RETENTION_HEADER, str(int(ttl))),)
        self._policy[:] = [(base, policy, retention)]
        return self._policy[0]

    # -- deciding --------------------------------------------------------------------------
    def plan(self, request: Incoming) -> RecordKey | StoredResponse | None:
        """None: not guarded (pass through). A response: refuse now. A target: guard it."""
        route = (
            next((r for r in self.routes if r.matches(request.path)), None) if self.routes else None
        )
        if route is not None and not route.guarded:
            return None
        methods = (
            self._methods
            if route is None or route.methods is None
            else {m.upper() for m in route.methods}
        )
        method = request.method
        if method not in methods and method.upper() not in methods:
            return None
        required = self.required if route is None or route.required is None else route.required
        value = request.headers.get(KEY_HEADER)
        if value is None:
            if not required:
                return None
            return self.problem(
                p.KEY_MISSING,
                f"{request.method} {request.path} needs an "
                'Idempotency-Key header, e.g. Idempotency-Key: "<uuid>"',
            )
        key = parse_key(value, lenient=self.lenient)
        if key is None:
            return self.problem(
                p.KEY_MALFORMED,
                "Idempotency-Key must be one quoted string "
                f"(RFC 8941 sf-string) of 1 to {MAX_KEY_LENGTH} characters",
            )
        if self._declares_too_much(request.headers):
            return self.too_large()
        return RecordKey(self.scope_for(request), key)

    def _declares_too_much(self, headers: Headers) -> bool:
        """The request's Content-Length says more than ``max_body``. A garbled length is the
        server's to reject; the read limit holds whatever it says."""
        declared = headers.get("content-length")
        try:
            return declared is not None and int(declared) > self.max_body
        except ValueError:
            return False

    def scope_for(self, request: Incoming) -> str:
        if self.principal is None:
            return self._anonymous
        return principal_scope(self.scope_prefix, self.principal(request))

    def too_large(self) -> StoredResponse:
        return self.problem(
            p.BODY_TOO_LARGE,
            f"the request body is larger than {self.max_body} bytes; nothing was stored",
        )

    def unreadable(self) -> StoredResponse:
        return self.problem(
            p.BODY_UNREADABLE,
            "the request body could not be read (the client went away mid-body?); "
            "nothing was stored, send the request again",
        )

    def payload(self, request: Incoming, body: bytes) -> dict[str, Any]:
        """What a request is fingerprinted by: method, path, query, body, chosen headers."""
        return {
            "method": exact(request.method.upper()),
            "path": path_form(request.path, request.path_bytes),
            "query": exact(request.query),
            "body": body_digest(request.headers.get("content-type"), body),
            "headers": {h: _header(request.headers.get(h)) for h in self.fingerprint_headers},
        }

    def digest(self, request: Incoming, body: bytes) -> str:
        """The request's fingerprint as stored: version 2 (``identity.http_digest``), which
        matches exactly where ``fingerprint`` does."""
        return self._made(http_digest, request, body)

    def chosen_headers(self, headers: Headers) -> str:
        """The fingerprinted headers' part of a fingerprint: their forms' canonical JSON."""
        chosen = self.fingerprint_headers
        return canonical({h: _header(headers.get(h)) for h in chosen}) if chosen else NO_HEADERS

    def fingerprint(self, request: Incoming, body: bytes) -> str:
        """Version 1, what records stored before version 2 carry: the Guard's fingerprint of
        ``payload(request, body)``, made here (the same digest)."""
        return self._made(http_fingerprint, request, body)

    def _made(self, make: Callable[..., str], request: Incoming, body: bytes) -> str:
        headers = request.headers
        return make(
            request.method.upper(),
            request.path,
            request.query,
            request.path_bytes,
            headers.get("content-type"),
            body,
            self.chosen_headers(headers),
        )

    # -- answering -------------------------------------------------------------------------
    def problem(
        self, kind: p.Kind, detail: str, retry_after: float | None = None
    ) -> StoredResponse:
        return problem_response(kind, detail, retry_after, self.problem_base)

    def problem_for(self, exc: IdempotencyError) -> StoredResponse:
        if isinstance(exc, InProgressError):
            return self.problem(
                p.KEY_IN_USE,
                "the first request with this key has not finished; retry after the delay",
                exc.retry_after,
            )
        if isinstance(exc, PayloadMismatchError):
            return self.problem(
                p.KEY_REUSED,
                "this key was used for a different method, path "
                "or body; send a new key for a new operation",
            )
        if isinstance(exc, UnresolvedError):
            return self.problem(
                p.KEY_UNRESOLVED,
                "an earlier attempt stopped part-way; an "
                "operator must resolve it before this key can be used",
            )
        if isinstance(exc, StoreUnavailableError):
            return self.problem(
                p.STORE_UNAVAILABLE,
                "the request was not processed; retry later with the same key",
                1.0,
            )
        if isinstance(exc, InvalidKeyError):
            return self.problem(p.KEY_MALFORMED, str(exc))
        return self.problem(p.REPLAY_UNAVAILABLE, "send the request again with a new key")

    def retention(self) -> tuple[tuple[str, str], ...]:
        """The Idempotency-Retention header of a stored response (none without a ttl)."""
        return self.current()[2]  # made (or remade) with the policy it advertises
