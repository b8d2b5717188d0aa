"""RFC 9457 problem details: every refusal of the HTTP layer, one stable ``type`` per case.

The ``type`` URIs are identifiers, not links: clients switch on them, so they never change once
published. The base is configurable for services that want them under their own domain.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

PROBLEM_BASE = "urn:mideng:problem:"
PROBLEM_JSON = "application/problem+json"


@dataclass(frozen=True, slots=True)
class Kind:
    slug: str
    status: int
    title: str


KEY_MISSING = Kind("key-missing", 400, "Idempotency-Key header is required")
KEY_MALFORMED = Kind("key-malformed", 400, "Idempotency-Key header is malformed")
KEY_IN_USE = Kind("key-in-use", 409, "A request with this Idempotency-Key is still in progress")
KEY_REUSED = Kind("key-reused", 422, "Idempotency-Key was already used for a different request")
KEY_UNRESOLVED = Kind(
    "key-unresolved", 409, "The outcome of the first request with this Idempotency-Key is unknown"
)
REPLAY_UNAVAILABLE = Kind(
    "replay-unavailable", 409, "The response stored for this Idempotency-Key can't be replayed"
)
BODY_TOO_LARGE = Kind("body-too-large", 413, "Request body is too large")
BODY_UNREADABLE = Kind("body-unreadable", 400, "Request body could not be read")
STORE_UNAVAILABLE = Kind("store-unavailable", 503, "The idempotency store is unavailable")
TOKEN_MISSING = Kind("token-missing", 400, "A resubmit token is required")
TOKEN_REJECTED = Kind(
    "token-rejected", 409, "The resubmit token was already used, has expired or was never issued"
)
TOO_SOON = Kind("too-soon", 429, "This operation was called too recently; try again later")

KINDS = (
    KEY_MISSING,
    KEY_MALFORMED,
    KEY_IN_USE,
    KEY_REUSED,
    KEY_UNRESOLVED,
    REPLAY_UNAVAILABLE,
    BODY_TOO_LARGE,
    BODY_UNREADABLE,
    STORE_UNAVAILABLE,
    TOKEN_MISSING,
    TOKEN_REJECTED,
    TOO_SOON,
)


@dataclass(frozen=True, slots=True)
class Problem:
    kind: Kind
    detail: str
    retry_after: float | None = None
    request_id: str | None = None

    @property
    def status(self) -> int:
        return self.kind.status

    def body(self, base: str = PROBLEM_BASE) -> bytes:
        doc: dict[str, object] = {
            "type": base + self.kind.slug,
            "title": self.kind.title,
            "status": self.kind.status,
            "detail": self.detail,
        }
        if self.request_id is not None:
            doc["request_id"] = self.request_id
        return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    def headers(self, body: bytes) -> tuple[tuple[str, str], ...]:
        headers = [
            ("content-type", PROBLEM_JSON),
            ("content-length", str(len(body))),
            ("cache-control", "no-store"),
        ]
        if self.retry_after is not None:
            headers.append(("retry-after", str(retry_after_seconds(self.retry_after))))
        return tuple(headers)


def retry_after_seconds(seconds: float) -> int:
    """Retry-After carries whole seconds; round up so a client never comes back too early."""
    return max(1, math.ceil(seconds))
