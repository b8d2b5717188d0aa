"""The dashboard's pages, each a procedure of effects (mideng.core.effects) that reads what it
shows through the store, the outbox and the operations, and returns its template and values:
written once, carried out by ``effects.arun`` under Starlette and ``effects.run`` under Django.

Lists page by keyset: a page's link to the next carries the last row's position (``after``),
never an offset.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mideng.core import effects
from mideng.core.audit import AuditQuery
from mideng.core.effects import Effects
from mideng.core.keys import check_key, check_scope
from mideng.core.record import Record
from mideng.errors import IdempotencyError
from mideng.guard.guard import Guard
from mideng.operations.pending import judge, unfinished
from mideng.operations.results import PendingOperation
from mideng.outbox.survey import STATE_NAMES, OutboxSurvey, RowQuery
from mideng.stores.audit import AuditStore
from mideng.stores.steps import OperationPosition, StepStore
from mideng.stores.survey import (
    ESTIMATED_STATUSES,
    STATUSES,
    ListingStore,
    Position,
    RecordQuery,
    SurveyStore,
)

#: The overview's chart: the last hour in twelve bars of five minutes.
CHART_SPAN, CHART_BARS = 3600.0, 12
#: Operations an overview or a list shows at most (they are read oldest first, unpaged).
OPERATIONS_LISTED = 100


class BadRequest(Exception):
    """A query the operator typed that names nothing (shown back, escaped, as a 400)."""


@dataclass
class Page:
    template: str
    values: dict[str, Any]
    status: int = 200


@dataclass
class Dashboard:
    """What the pages read from: the Guard over the store, the outbox (when given a
    database), and how many rows a page holds."""

    guard: Guard
    outbox: OutboxSurvey | None
    page_size: int

    @property
    def store(self) -> SurveyStore:
        store = self.guard.store
        if not isinstance(store, SurveyStore):
            raise BadRequest(f"{type(store).__name__} can't be surveyed by a dashboard")
        return store

    def listing(self) -> ListingStore:
        store = self.guard.store
        if not isinstance(store, ListingStore):
            raise BadRequest(f"{type(store).__name__} does not list its records")
        return store

    def audit_store(self) -> AuditStore:
        store = self.guard.store
        if not isinstance(store, AuditStore):
            raise BadRequest(f"{type(store).__name__} keeps no audit")
        return store

    def outbox_survey(self) -> OutboxSurvey:
        if self.outbox is None:
            raise BadRequest("this dashboard was given no outbox database (--db)")
        return self.outbox


# -- cursors -------------------------------------------------------------------------------
def cursor(values: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


def uncursor(text: str | None) -> list[Any] | None:
    if not text:
        return None
    try:
        values = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, binascii.Error) as exc:
        raise BadRequest("the page's position is not one this dashboard wrote") from exc
    if not isinstance(values, list):
        raise BadRequest("the page's position is not one this dashboard wrote")
    return values


def _position(text: str | None) -> Position | None:
    values = uncursor(text)
    if values is None:
        return None
    try:
        scope, key, lease = values
        return Position(str(scope), str(key), None if lease is None else float(lease))
    except (TypeError, ValueError) as exc:
        raise BadRequest("the page's position is not one this dashboard wrote") from exc


def _one_of(name: str, value: str | None, allowed: tuple[str, ...]) -> str | None:
    if not value:
        return None
    if value not in allowed:
        raise BadRequest(f"{name} is one of {', '.join(allowed)}")
    return value


def scope_of(value: str | None) -> str | None:
    if not value:
        return None
    try:
        return check_scope(value)
    except (IdempotencyError, ValueError, TypeError) as exc:
        raise BadRequest(str(exc)) from exc


def key_of(value: str | None) -> str:
    try:
        return check_key(value or "")
    except (IdempotencyError, ValueError, TypeError) as exc:
        raise BadRequest(str(exc)) from exc


# -- the pages -----------------------------------------------------------------------------
def overview(dash: Dashboard, query: Mapping[str, str]) -> Effects[Page]:
    store = dash.store
    # grace=0: every lease that ran out is listed (the CLI's stats waits a minute first); no
    # spread of retention and no biggest records: the page shows neither.
    found = yield effects.call(
        store.survey, store.asurvey, None, grace=0.0, biggest=0, spread=False
    )
    chart_values, chart_estimated = None, False
    listing = dash.guard.store
    if isinstance(listing, ListingStore):  # a store that lists (Redis alone does not)
        since = found.now - CHART_SPAN
        outcomes = yield effects.call(
            listing.outcomes, listing.aoutcomes, since, CHART_SPAN / CHART_BARS
        )
        chart_values = chart(outcomes.counts)
        chart_estimated = outcomes.estimated
    backlog = None
    if dash.outbox is not None:
        backlog = yield effects.call(dash.outbox.backlog, dash.outbox.abacklog)
    operations = yield from _operations(dash, None)
    return Page(
        "overview.html",
        {
            "survey": found,
            "now": found.now,
            "statuses": STATUSES,
            "estimated_statuses": ESTIMATED_STATUSES,
            "chart": chart_values,
            "chart_estimated": chart_estimated,
            "backlog": backlog,
            "operations": operations,
            "stale": [op for op in operations if op.state == "expired"],
        },
    )


def records(dash: Dashboard, query: Mapping[str, str]) -> Effects[Page]:
    listing = dash.listing()
    asked = RecordQuery(
        scope_of(query.get("scope")),
        _one_of("status", query.get("status"), STATUSES),
        _position(query.get("after")),
        dash.page_size + 1,
    )
    found = yield effects.call(listing.list_records, listing.alist_records, asked)
    shown = found[: dash.page_size]
    after = None
    if len(found) > dash.page_size:
        last = Position.after(shown[-1])
        after = cursor([last.scope, last.key, last.lease_until])
    values = {"records": shown, "query": asked, "after": after, "statuses": STATUSES}
    bulk = bulk_records(asked, shown, time.time())
    seen = None if bulk is None else {"records": seen_records(bulk), "n": len(bulk)}
    return Page("records.html", {**values, "bulk": seen})


def bulk_records(asked: RecordQuery, shown: list[Record], now: float) -> list[Record] | None:
    """What a bulk action on the page acts on: every UNKNOWN record of a page of them
    (resolve), the processing records whose lease ran out of a page of processing ones
    (release); None for other pages."""
    if asked.status == "unknown":
        chosen = shown
    elif asked.status == "processing":
        chosen = [r for r in shown if not r.lease_live(now)]
    else:
        return None
    return chosen or None


def seen_records(records: list[Record]) -> str:
    """Records as a bulk action's form names them: ``[scope, key, status, fence]`` (JSON)."""
    return json.dumps([[r.scope, r.key, r.status.value, r.fence] for r in records])


def record(dash: Dashboard, query: Mapping[str, str]) -> Effects[Page]:
    scope, key = scope_of(query.get("scope")), key_of(query.get("key"))
    if scope is None:
        raise BadRequest("a record is named by its scope and key")
    found = yield effects.call(dash.guard.get, dash.guard.aget, scope, key)
    return Page("record.html", {"record": found, "scope": scope, "key": key})


def outbox(dash: Dashboard, query: Mapping[str, str]) -> Effects[Page]:
    survey = dash.outbox_survey()
    states = tuple(STATE_NAMES.values())
    after = uncursor(query.get("after"))
    asked = RowQuery(
        _one_of("state", query.get("state"), states),
        query.get("destination") or None,
        None if after is None else str(after[0]),
        dash.page_size + 1,
    )
    found = yield effects.call(survey.rows, survey.arows, asked)
    shown = found[: dash.page_size]
    more = cursor([shown[-1].id]) if len(found) > dash.page_size else None
    # What a bulk requeue of the page's dead rows acts on: each id with the attempts seen.
    seen_rows = ",".join(f"{r.id}:{r.attempts}" for r in shown if r.state == "dead")
    values = {"rows": shown, "query": asked, "after": more, "states": states}
    return Page("outbox.html", {**values, "seen_rows": seen_rows})


def outbox_row(dash: Dashboard, query: Mapping[str, str]) -> Effects[Page]:
    survey = dash.outbox_survey()
    row_id = query.get("id") or ""
    found = yield effects.call(survey.row, survey.arow, row_id)
    return Page("outbox_row.html", {"row": found, "id": row_id})


def operations(dash: Dashboard, query: Mapping[str, str]) -> Effects[Page]:
    """Unfinished operations, oldest first, by keyset on (began, scope, key): a page reads
    ``page_size`` operations and shows those not done (a done one whose steps are still kept
    is read, not shown), so a page may show fewer."""
    scope = scope_of(query.get("scope"))
    store = dash.guard.store
    values: dict[str, Any] = {"operations": [], "scope": scope, "after": None}
    if not isinstance(store, StepStore):
        return Page("operations.html", values)
    size = dash.page_size
    read = yield effects.call(
        store.operations, store.aoperations, scope, size + 1, _operation_position(query)
    )
    if len(read) > size:
        last = OperationPosition.of(read[size - 1])
        values["after"] = cursor([last.started_at, last.scope, last.key])
    values["operations"] = unfinished(dash.guard, read[:size])
    return Page("operations.html", values)


def _operation_position(query: Mapping[str, str]) -> OperationPosition | None:
    values = uncursor(query.get("after"))
    if values is None:
        return None
    try:
        began, scope, key = values
        return OperationPosition(float(began), str(scope), str(key))
    except (TypeError, ValueError) as exc:
        raise BadRequest("the page's position is not one this dashboard wrote") from exc


def operation(dash: Dashboard, query: Mapping[str, str]) -> Effects[Page]:
    scope, key = scope_of(query.get("scope")), key_of(query.get("key"))
    if scope is None:
        raise BadRequest("an operation is named by its scope and key")
    entry = yield from one_operation(dash, scope, key)
    current = yield effects.call(dash.guard.get, dash.guard.aget, scope, key)
    return Page(
        "operation.html", {"operation": entry, "record": current, "scope": scope, "key": key}
    )


def one_operation(dash: Dashboard, scope: str, key: str) -> Effects[PendingOperation | None]:
    """The operation ``scope``:``key`` as ``pending`` reports it (DONE too); None when no
    steps or arguments are kept for it."""
    store = dash.guard.store
    if not isinstance(store, StepStore):
        return None
    entry = yield effects.call(store.operation, store.aoperation, scope, key)
    return None if entry is None else judge(dash.guard, entry, time.time())


def _operations(dash: Dashboard, scope: str | None) -> Effects[list[PendingOperation]]:
    if not isinstance(dash.guard.store, StepStore):
        return []
    found: list[PendingOperation] = yield effects.call(
        dash.guard.pending, dash.guard.apending, scope, OPERATIONS_LISTED
    )
    return found


def lookup(dash: Dashboard, query: Mapping[str, str]) -> Effects[Page]:
    """Exact lookup: a record by scope and key, an outbox row by message id, an operation by
    scope and key, records and rows by request id."""
    kind = _one_of("kind", query.get("kind"), LOOKUPS) or "key"
    text = (query.get("q") or "").strip()
    if not text:
        raise BadRequest("type what to look up")
    values: dict[str, Any] = {"kind": kind, "q": text, "records": [], "rows": []}
    if kind in ("key", "operation"):
        scope, _, key = (
            text.partition(":") if not query.get("scope") else (query["scope"], "", text)
        )
        page = record if kind == "key" else operation
        found = yield from page(dash, {"scope": scope, "key": key})
        return found
    if kind == "message":
        return (yield from outbox_row(dash, {"id": text}))
    listing = dash.listing()
    values["records"] = yield effects.call(
        listing.with_request_id, listing.awith_request_id, text, dash.page_size
    )
    if dash.outbox is not None:
        values["rows"] = yield effects.call(
            dash.outbox.with_request_id, dash.outbox.awith_request_id, text, dash.page_size
        )
    return Page("lookup.html", values)


LOOKUPS = ("key", "message", "operation", "request")

#: Where an audit page reads: the record store's audit, or the outbox's.
AUDITS = ("records", "outbox")
#: The actions an audit row may name (the audit page's filter offers them).
AUDITED_ACTIONS = ("resolve", "release", "requeue", "reconcile")


def audit(dash: Dashboard, query: Mapping[str, str]) -> Effects[Page]:
    """Operators' actions, newest first, by keyset on the audit's id: of the record store
    (resolve, release, reconcile) or of the outbox (requeue), filtered by operator, action and
    target (each exact)."""
    of = _one_of("of", query.get("of"), AUDITS) or "records"
    after = uncursor(query.get("after"))
    asked = AuditQuery(
        query.get("operator") or None,
        _one_of("action", query.get("action"), AUDITED_ACTIONS),
        query.get("target") or None,
        None if after is None else str(after[0]),
        dash.page_size + 1,
    )
    if of == "outbox":
        survey = dash.outbox_survey()
        found = yield effects.call(survey.audit_rows, survey.aaudit_rows, asked)
    else:
        store = dash.audit_store()
        found = yield effects.call(store.audit_rows, store.aaudit_rows, asked)
    shown = found[: dash.page_size]
    more = cursor([shown[-1].id]) if len(found) > dash.page_size else None
    values = {"rows": shown, "query": asked, "of": of, "after": more}
    return Page("audit.html", {**values, "sources": AUDITS, "audited": AUDITED_ACTIONS})


def chart(counts: list[tuple[int, str, int]]) -> dict[str, Any]:
    """The overview's bars: per five minutes of the last hour, each status's count stacked,
    as rectangles in a 240 x 80 drawing (SVG written by the template, no script)."""
    per_bar = [
        dict.fromkeys(("succeeded", "failed", "unknown", "processing"), 0)
        for _ in range(CHART_BARS)
    ]
    for bucket, status, n in counts:
        if 0 <= bucket < CHART_BARS and status in per_bar[bucket]:
            per_bar[bucket][status] += n
    top = max((sum(bar.values()) for bar in per_bar), default=0) or 1
    rects = []
    for n, bar in enumerate(per_bar):
        y = 80.0
        for status, count in bar.items():
            height = 80.0 * count / top
            if count:
                y -= height
                rects.append(
                    {
                        "x": n * 20 + 2,
                        "y": round(y, 1),
                        "h": round(height, 1),
                        "status": status,
                        "count": count,
                    }
                )
    total = {s: sum(bar[s] for bar in per_bar) for s in per_bar[0]}
    return {"rects": rects, "top": top, "total": total}


#: Each page by its path below the mount.
PAGES: dict[str, Callable[[Dashboard, Mapping[str, str]], Effects[Page]]] = {
    "/": overview,
    "/records": records,
    "/record": record,
    "/outbox": outbox,
    "/outbox/row": outbox_row,
    "/operations": operations,
    "/operation": operation,
    "/lookup": lookup,
    "/audit": audit,
}


def preview(record: Record | None) -> str | None:
    """A record's stored result as text: JSON pretty-printed, anything else described."""
    if record is None or record.result is None:
        return None
    if record.codec != "json":
        return f"<{record.codec}: {len(record.result)} bytes>"
    try:
        return json.dumps(json.loads(record.result), indent=2, ensure_ascii=False)[:4000]
    except ValueError:
        return f"<unreadable: {len(record.result)} bytes>"
