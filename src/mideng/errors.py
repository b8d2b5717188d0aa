"""One exception tree: every error mideng raises on its own account is an IdempotencyError.

Business exceptions raised by a guarded body are never wrapped or swallowed; they reach the
caller untouched. Only the idempotency machinery's own answers live here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mideng.core.record import Record


class IdempotencyError(Exception):
    """Base of every error raised by mideng itself."""


class ConfigurationError(IdempotencyError, ValueError):
    """mideng was set up wrongly (bad URL, bad option); raised before anything is stored."""


class SchemaVersionError(ConfigurationError):
    """mideng's tables are at a schema version this mideng may not use: newer than it knows,
    older where it may not upgrade them, or absent where it does not create them. The message
    names the release to install or the ``mideng migrate`` command to run."""


class InvalidKeyError(IdempotencyError, ValueError):
    """A key or scope is empty, too long or not text."""


class KeyMissingError(InvalidKeyError):
    """A key template names something the call does not have (or a required key is absent)."""


class CodecError(IdempotencyError):
    """A result could not be encoded for storage, or a stored result could not be decoded."""


class _RecordError(IdempotencyError):
    """An error about one stored record; carries it so callers can inspect or log it."""

    def __init__(self, message: str, record: Record | None = None) -> None:
        super().__init__(message)
        self.record = record


class RecordChangedError(_RecordError):
    """An operator's action found the record no longer as they saw it (another status or
    fence, or gone: ``record`` is None); it changed nothing. mideng.guard.operator answers
    this as ``Changed`` or ``Gone``, never raises it."""


class InProgressError(_RecordError):
    """Another caller holds a live claim on the same (scope, key); retry later."""

    def __init__(self, message: str, record: Record | None = None, retry_after: float = 1.0):
        super().__init__(message, record)
        self.retry_after = retry_after


class PayloadMismatchError(_RecordError):
    """The same (scope, key) was used before with a different payload."""


class UnresolvedError(_RecordError):
    """The record is UNKNOWN: a holder died mid-way through irreversible work.

    Nobody knows whether the external effect happened; callers are refused until someone asks
    the provider and settles the record with ``Guard.resolve``.
    """


class LeaseLostError(_RecordError):
    """The caller's claim was taken over (its fence is stale); its late write changed nothing."""


class AttemptsExhaustedError(_RecordError):
    """A task (on_error="retry") failed max_attempts times; it is refused until an operator
    forgets (releases) or resolves its record. ``last_error``: its last failure, rebuilt."""

    def __init__(
        self, message: str, record: Record | None = None, last_error: BaseException | None = None
    ) -> None:
        super().__init__(message, record)
        self.last_error = last_error


class StoreUnavailableError(IdempotencyError):
    """The store could not be reached or failed; the driver error is chained as __cause__."""


class TokenRejectedError(IdempotencyError):
    """An anti-resubmit token was missing, already used, expired or bound to another key."""


class RecordedFailureError(_RecordError):
    """Replay of a recorded failure (``on_error="record"``) whose type can't be rebuilt."""

    def __init__(self, type_name: str, message: str, record: Record | None = None) -> None:
        super().__init__(f"{type_name}: {message}", record)
        self.type_name = type_name
        self.original_message = message


def one_line(exc: BaseException) -> str:
    """An error's message as one line, for an operator's command. A driver's runs over
    several (libpq adds a hint, SQLAlchemy the statement and a link); the first says what
    failed."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def named(exc: BaseException) -> str:
    """``one_line`` after the error's type (a driver's error, whose message alone may not say
    what kind of failure it is). No URL is added: it may hold a password."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {one_line(exc)}" if text else type(exc).__name__


def is_usage(exc: IdempotencyError) -> bool:
    """Whether a command's failure is how it was asked (an option, a store URL, a scope or key
    refused: exit 2) rather than what it met (the store failed, a record in the way, a
    schema behind: exit 1)."""
    if isinstance(exc, SchemaVersionError):  # what the database holds, not how it was asked
        return False
    return isinstance(exc, (ConfigurationError, InvalidKeyError))


__all__ = [
    "AttemptsExhaustedError",
    "CodecError",
    "ConfigurationError",
    "IdempotencyError",
    "InProgressError",
    "InvalidKeyError",
    "KeyMissingError",
    "LeaseLostError",
    "PayloadMismatchError",
    "RecordChangedError",
    "RecordedFailureError",
    "SchemaVersionError",
    "StoreUnavailableError",
    "TokenRejectedError",
    "UnresolvedError",
    "is_usage",
    "named",
    "one_line",
]
