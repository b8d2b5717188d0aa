"""An operator's actions on one record, conditional on what they saw.

``resolve_record`` settles an UNKNOWN record (or a processing one whose lease ran out, or a
kept failure) as it happened (``result=``) or as it did not (``failed=True``);
``release_record`` deletes such a record, so the next call runs as the first. Each takes the
``Seen`` status and fence the operator looked at, and acts only while the record is still so:
one store operation (one Lua script on Redis; a read and a compare-and-set on SQL, which
changes nothing if the row moved after the read), never a read here and a write after it.
The answer is ``Done``, ``Changed(now=record)`` or ``Gone`` (mideng.core.answers); a
record that changed meanwhile is an answer, not an error.

The ``mideng`` CLI (``resolve`` / ``release --if-fence``), Django's admin and a dashboard
call these.
"""

from __future__ import annotations

from typing import Any

from mideng.core import effects
from mideng.core.answers import Answer, Changed, Done, Gone
from mideng.core.audit import AuditEntry
from mideng.core.keys import check_key, check_scope
from mideng.core.record import Record, Resolution, Seen
from mideng.core.settle import UNSET, resolution
from mideng.errors import RecordChangedError
from mideng.guard.guard import Guard


def _acted(guard: Guard, scope: str, key: str, how: Resolution) -> effects.Effects[Answer[Record]]:
    """The store's conditional resolve (or evict), its refusal as an answer: written once for
    the blocking and the awaiting caller."""
    store = guard.store
    try:
        record = yield effects.call(store.resolve, store.aresolve, scope, check_key(key), how)
    except RecordChangedError as exc:
        return Gone() if exc.record is None else Changed(exc.record)
    return Done(record)


def _settling(
    guard: Guard, scope: str, seen: Seen, result: Any, failed: bool, audit: AuditEntry | None
) -> Resolution:
    how = resolution(guard.policy(check_scope(scope)), result, failed)
    return how._replace(seen=seen, audit=audit)


def _evicting(scope: str, seen: Seen, audit: AuditEntry | None) -> Resolution:
    check_scope(scope)
    return Resolution(None, None, False, None, seen, evict=True, audit=audit)


def resolve_record(
    guard: Guard,
    scope: str,
    key: str,
    seen: Seen,
    *,
    result: Any = UNSET,
    failed: bool = False,
    audit: AuditEntry | None = None,
) -> Answer[Record]:
    """Settle ``scope``:``key`` if it is still at ``seen`` (status and fence): ``result=``
    the effect happened and duplicates replay this (encoded with the scope's codec), or
    ``failed=True`` it did not (the next call runs). ``Done(now=the settled record)``;
    ``Changed(now=the record)`` if it moved or is not resolvable any more; ``Gone``.
    ``audit``: the store writes it with the settlement (``mideng.stores.audit``)."""
    how = _settling(guard, scope, seen, result, failed, audit)
    return effects.run(_acted(guard, scope, key, how))


async def aresolve_record(
    guard: Guard,
    scope: str,
    key: str,
    seen: Seen,
    *,
    result: Any = UNSET,
    failed: bool = False,
    audit: AuditEntry | None = None,
) -> Answer[Record]:
    """``resolve_record``, awaited."""
    how = _settling(guard, scope, seen, result, failed, audit)
    return await effects.arun(_acted(guard, scope, key, how))


def release_record(
    guard: Guard, scope: str, key: str, seen: Seen, *, audit: AuditEntry | None = None
) -> Answer[Record]:
    """Delete ``scope``:``key`` if it is still at ``seen`` and still stuck (UNKNOWN, its lease
    run out, or a kept failure): the next call runs its body as the first. ``Done(now=the
    record as it was)``; ``Changed(now=the record)``; ``Gone``. ``audit``: as for
    ``resolve_record``."""
    return effects.run(_acted(guard, scope, key, _evicting(scope, seen, audit)))


async def arelease_record(
    guard: Guard, scope: str, key: str, seen: Seen, *, audit: AuditEntry | None = None
) -> Answer[Record]:
    """``release_record``, awaited."""
    return await effects.arun(_acted(guard, scope, key, _evicting(scope, seen, audit)))


__all__ = ["arelease_record", "aresolve_record", "release_record", "resolve_record"]
