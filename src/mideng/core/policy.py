"""How one scope behaves: lease, retention, error handling, what to do on in-progress."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from mideng.core.codec import JSON_CODEC, Codec, get_codec
from mideng.core.record import ExpiryPolicy
from mideng.errors import ConfigurationError


def doubled(first: float, cap: float, n: int) -> float:
    """The n-th delay of a backoff that doubles from ``first`` (n = 1), at most ``cap``: every
    retry schedule mideng keeps (failed messages, outbox publishes, broker reconnects)."""
    return float(min(cap, first * 2.0 ** min(max(n - 1, 0), 60)))


class OnError(str, enum.Enum):
    RELEASE = "release"  # drop the claim: a retry runs the body again
    RECORD = "record"  # keep the failure: duplicates get the same error back
    # Task tracking: keep the failure (error, attempts, time) and let the next call run again,
    # up to max_attempts; after that, callers get AttemptsExhaustedError.
    RETRY = "retry"


class OnInProgress(str, enum.Enum):
    RAISE = "raise"
    WAIT = "wait"


def _seconds(value: object) -> bool:
    """Whether ``value`` is a finite positive number of seconds (a bool is not one)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


@dataclass(frozen=True)
class Policy:
    lease: float = 60.0
    ttl: float | None = 86400.0
    on_error: OnError = OnError.RELEASE
    in_progress: OnInProgress = OnInProgress.RAISE
    wait_timeout: float = 30.0
    on_expiry: ExpiryPolicy = ExpiryPolicy.TAKE_OVER
    # A Codec; a registered name ("json", "pickle") is accepted where a policy is made and
    # resolved here, so every reader gets the codec itself.
    codec: Codec = JSON_CODEC
    heartbeat: bool = True
    # Availability over safety, only when asked: with the store down the body runs unguarded
    # (a WARNING each time) instead of failing with StoreUnavailableError.
    fail_open: bool = False
    # on_error="retry": how many attempts a task gets before callers are refused.
    max_attempts: int = 3
    #: The claim's max_attempts: 0 unless failures are kept and retried. Worked out once here
    #: (every guarded call reads it), not an option.
    retry_limit: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        for name in ("lease", "wait_timeout"):
            if not _seconds(getattr(self, name)):
                raise ConfigurationError(
                    f"{name} must be a positive number of seconds: {getattr(self, name)!r}"
                )
        if self.ttl is not None and not _seconds(self.ttl):
            raise ConfigurationError(f"ttl must be positive seconds or None: {self.ttl!r}")
        # Taken by truth value, "false" or "off" (a setting read from text) would switch a
        # flag on: fail_open would run bodies unguarded whenever the store is down.
        for name in ("heartbeat", "fail_open"):
            if type(getattr(self, name)) is not bool:
                raise ConfigurationError(f"{name} must be True or False: {getattr(self, name)!r}")
        try:
            object.__setattr__(self, "on_error", OnError(self.on_error))
            object.__setattr__(self, "in_progress", OnInProgress(self.in_progress))
            object.__setattr__(self, "on_expiry", ExpiryPolicy(self.on_expiry))
        except ValueError as exc:
            raise ConfigurationError(str(exc)) from exc
        object.__setattr__(self, "codec", get_codec(self.codec))
        attempts = self.max_attempts
        if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1:
            raise ConfigurationError(f"max_attempts must be an int >= 1: {self.max_attempts!r}")
        limit = self.max_attempts if self.on_error is OnError.RETRY else 0
        object.__setattr__(self, "retry_limit", limit)

    def merged(self, **overrides: Any) -> Policy:
        if not overrides:
            return self
        known = {f.name for f in fields(self) if f.init}
        unknown = set(overrides) - known
        if unknown:
            raise ConfigurationError(f"unknown option(s) {sorted(unknown)}; known: {sorted(known)}")
        return replace(self, **overrides)
