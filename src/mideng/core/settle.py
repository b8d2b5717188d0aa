"""After the body: what a claim becomes, decided without I/O (both drivers carry it out);
and how an operator's ``resolve`` settles an UNKNOWN record.

A result is encoded and completes the claim. An exception either releases the claim (the retry
may run again: the default, and always for cancellation and interrupts) or records the failure
so duplicates replay it (``on_error="record"``, business exceptions only). A result the codec
can't store means the body ran but can't be replayed: that is recorded as the failure, so
duplicates get the same clear error instead of running the body again.
"""

from __future__ import annotations

from typing import Any

from mideng.core.failure import encode_failure
from mideng.core.policy import OnError, Policy
from mideng.errors import CodecError, ConfigurationError

_RELEASE = OnError.RELEASE
#: ``resolve(result=UNSET)``: no result given (None is a result).
UNSET: Any = object()


def failure_to_record(policy: Policy, exc: BaseException) -> bytes | None:
    """The failure to store for ``exc``, or None when the claim is to be released."""
    if isinstance(exc, CodecError) or (
        policy.on_error is not _RELEASE and isinstance(exc, Exception)
    ):
        return encode_failure(exc)
    return None


def resolution(policy: Policy, result: Any, failed: bool) -> dict[str, Any]:
    """How an operator settles an UNKNOWN record: ``result`` (it happened; encoded as the
    scope's codec would) or ``failed`` (it didn't) — exactly one of them."""
    if failed == (result is not UNSET):
        raise ConfigurationError("resolve() needs exactly one of result=... or failed=True")
    codec = policy.codec
    return {
        "result": None if failed else codec.encode(result),
        "codec": None if failed else codec.name,
        "failed": failed,
        "ttl": policy.ttl,
    }
