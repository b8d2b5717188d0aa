"""What the operator commands report of a store, written once for every command that reports
it: ``mideng stats`` / ``scan`` / ``purge`` and the Django app's ``mideng_stats`` /
``mideng_purge``. A survey taken (its stuck records logged), its JSON (stable field names,
docs/cli.md), and the purge run in steps."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from mideng.errors import ConfigurationError
from mideng.observability import logs
from mideng.observability.observers import store_label
from mideng.stores.base import Store
from mideng.stores.survey import (
    ESTIMATED_STATUSES,
    EXPIRY_LABELS,
    Progress,
    Survey,
    SurveyStore,
)

#: Records deleted per store call while purging (each call its own short transaction).
PURGE_STEP = 1000


def when(epoch: float | None) -> str | None:
    """A store time as ISO 8601 in UTC, to the millisecond (None stays None)."""
    if epoch is None:
        return None
    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).isoformat(timespec="milliseconds")


def surveyed(
    store: Store,
    prefix: str | None,
    grace: float,
    biggest: int = 0,
    progress: Progress = None,
    *,
    spread: bool = True,
    exact: bool = False,
) -> Survey:
    """The store's survey, with an ERROR logged per stuck record (what alerting reads).
    Without the ``spread`` of retention nor the ``biggest`` records, a big SQL table's
    succeeded records are estimated unless ``exact`` (``Survey.estimated``)."""
    if not isinstance(store, SurveyStore):
        raise ConfigurationError(f"{type(store).__name__} can't be surveyed")
    found = store.survey(
        prefix, grace=grace, biggest=biggest, progress=progress, spread=spread, exact=exact
    )
    for s in found.stuck:
        logs.stuck_record(s.scope, s.key, s.fence, s.lapsed, s.request_id)
    return found


def stuck(found: Survey) -> list[dict[str, Any]]:
    return [
        {
            "scope": s.scope,
            "key": s.key,
            "fence": s.fence,
            "lease_lapsed_seconds": round(s.lapsed, 3),
            "request_id": s.request_id,
        }
        for s in found.stuck
    ]


def stats(store: Store, found: Survey, prefix: str | None, grace: float) -> dict[str, Any]:
    """``stats --json``: records by scope and status, stuck and UNKNOWN ones."""
    age, waited = found.oldest_processing_age, found.oldest_unknown_age
    return {
        "store": store_label(store),
        "now": when(found.now),
        "prefix": prefix,
        "total": found.total,
        "estimated": found.estimated,
        "estimated_statuses": list(ESTIMATED_STATUSES) if found.estimated else [],
        "by_scope": found.by_scope,
        "unscoped": found.unscoped,
        "by_status": found.by_status(),
        "unknown": found.unknown,
        "stuck": found.stuck_count,
        "stuck_records": stuck(found),
        "grace_seconds": grace,
        "oldest_processing_age_seconds": None if age is None else round(age, 3),
        "oldest_unknown_age_seconds": None if waited is None else round(waited, 3),
    }


def estimate_note(found: Survey) -> str | None:
    """The line that says which counts are estimates (None: every count is exact)."""
    if not found.estimated:
        return None
    what = ", ".join(ESTIMATED_STATUSES)
    return (
        f"estimated: {what} (and the total), from the database's statistics or a sample; "
        "processing, unknown and failed are exact; --exact counts every row"
    )


def stats_failed(found: Survey) -> bool:
    """Whether ``stats`` exits 1: a record is stuck or UNKNOWN."""
    return bool(found.stuck_count or found.unknown)


def keys_by_scope(found: Survey) -> dict[str, int]:
    return {scope: sum(statuses.values()) for scope, statuses in sorted(found.by_scope.items())}


def scan(store: Store, found: Survey, prefix: str | None) -> dict[str, Any]:
    """``scan --json``: the keyspace's shape."""
    return {
        "store": store_label(store),
        "now": when(found.now),
        "prefix": prefix,
        "nodes": found.nodes,
        "total": found.total,
        "keys_by_scope": keys_by_scope(found),
        "ttl_histogram": {name: found.expiry[name] for name in EXPIRY_LABELS},
        "without_ttl": found.expiry["never"],
        "without_ttl_by_scope": dict(sorted(found.no_expiry_by_scope.items())),
        "biggest": [{"scope": b.scope, "key": b.key, "bytes": b.bytes} for b in found.biggest],
        "stuck": found.stuck_count,
        "stuck_records": stuck(found),
    }


def purge(
    store: Store,
    limit: int | None,
    older_than: float | None,
    done_so_far: Callable[[int], None] | None = None,
) -> int:
    """Delete expired records (``older_than``: also finished ones last written longer ago),
    in steps of PURGE_STEP, each its own short transaction; at most ``limit``. How many."""
    if older_than is not None and not isinstance(store, SurveyStore):
        raise ConfigurationError(f"{type(store).__name__} can't purge --older-than")
    total = 0
    while limit is None or total < limit:
        step = PURGE_STEP if limit is None else min(PURGE_STEP, limit - total)
        if older_than is None:
            done = store.purge(step)
        else:
            assert isinstance(store, SurveyStore)
            done = store.purge_older(older_than, step)
        total += done
        if done_so_far is not None:
            done_so_far(total)
        if done < step:
            break
    return total


def purged(store: Store, total: int, older_than: float | None) -> dict[str, Any]:
    """``purge --json``."""
    return {"purged": total, "older_than_seconds": older_than, "self_expiring": store.self_expiring}


def purged_line(store: Store, total: int, older_than: float | None) -> str:
    """What ``purge`` prints without ``--json``."""
    what = "expired" if older_than is None else f"finished, older than {older_than:g} s,"
    own = " (this store expires records itself)" if store.self_expiring else ""
    return f"purged {total} {what} record(s){own}"
