"""Django's admin over mideng's tables: read-only pages, and operators' actions conditional on
what the operator saw.

No one may add, change or delete a row here (mideng writes its tables; a hand edit would break
the fences and per-key order they carry). Each action is gated by a custom permission of the
app (``mideng.requeue_outbox``, ``mideng.resolve_record``, ``mideng.release_record``,
``mideng.reconcile_operation``); a staff user without it does not see the action, and a forged
POST naming it is refused (403), nothing done.

An action acts on the rows as the list showed them: the list carries, per row, what the
operator saw (an outbox row's failed attempts, a record's status and fence, an operation's state and
its record's fence) in a hidden field
of its form; the action's confirmation page carries it on, and the action is done only while
each row is still so (mideng.outbox.dead, mideng.guard.operator). One row changed between the
page and the POST is told "changed meanwhile", nothing done to it. Texts from the tables
(results, errors, payloads) are shown truncated and escaped by Django's autoescape, never
marked safe.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from mideng.contrib.django.models import (
    OperationListing,
    OutboxAudit,
    OutboxMessage,
    RecordAudit,
    RecordListing,
    StepListing,
)
from mideng.contrib.django.project import guard
from mideng.contrib.django.settings import config, database_url
from mideng.core.answers import Answer, Changed, Done
from mideng.core.audit import AuditEntry
from mideng.core.record import Record, Seen, Status
from mideng.guard.operator import release_record, resolve_record
from mideng.operations.pending import judge, store_of
from mideng.operations.results import OperationState, PendingOperation, SeenOperation
from mideng.outbox import dead
from mideng.outbox.schema import DEAD, PENDING
from mideng.stores.audit import AuditStore, record_target, seen_state
from mideng.stores.sql.engines import engine_for

T = TypeVar("T")

#: How much of a text from a table a list shows.
PREVIEW = 80
#: The hidden field carrying what the operator saw of a row: ``seen-<id>``.
SEEN = "seen-"
#: The confirmation page's answer: the action is to be done.
CONFIRMED = "post"


def preview(text: str | bytes | memoryview | None, limit: int = PREVIEW) -> str:
    """``text`` on one line, cut to ``limit`` characters (``…`` when cut); escaped where shown."""
    if text is None:
        return "-"
    if not isinstance(text, str):
        text = bytes(text).decode("utf-8", errors="replace")
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def ago(at: float) -> str:
    """How long ago ``at`` (epoch seconds, the store's clock) was, in whole seconds."""
    return f"{max(time.time() - at, 0.0):.0f} s ago"


def seen_field(row_id: str, value: object) -> str:
    """The hidden field that carries what the operator saw of ``row_id`` with the list's form."""
    return format_html('<input type="hidden" name="{}{}" value="{}">', SEEN, row_id, value)


def selected(request: HttpRequest) -> list[str]:
    """The ids the operator selected, in the order posted."""
    return request.POST.getlist(ACTION_CHECKBOX_NAME)


def seen_values(request: HttpRequest, ids: Sequence[str]) -> dict[str, str | None]:
    """What the operator saw of each of ``ids``, as the page posted it (None: not posted)."""
    return {row_id: request.POST.get(SEEN + row_id) for row_id in ids}


def confirmation(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    *,
    action: str,
    title: str,
    question: str,
    lines: list[str],
    seen: dict[str, str | None],
    confirm: str,
) -> TemplateResponse:
    """The action's intermediate page: what it will do, and a form posting it back with the
    rows selected and what was seen of each."""
    hidden: list[tuple[str, str]] = []
    for row_id, value in seen.items():
        hidden.append((ACTION_CHECKBOX_NAME, row_id))
        if value is not None:
            hidden.append((SEEN + row_id, value))
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "title": title,
        "question": question,
        "lines": lines,
        "hidden": hidden,
        "action": action,
        "confirm": confirm,
    }
    return TemplateResponse(request, "admin/mideng/confirm_action.html", context)


def said(row_id: str, answer: Answer[T], did: str, described: Callable[[T], str]) -> str:
    """One row's answer in words: ``did`` it, changed meanwhile (what it is now, nothing
    done), or gone (nothing done)."""
    if isinstance(answer, Done):
        return f"{did} {row_id}"
    if isinstance(answer, Changed):
        return f"Changed meanwhile, nothing done: {row_id} is now {described(answer.now)}"
    return f"Gone, nothing done: {row_id}"


def tell(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    answers: dict[str, Answer[T]],
    did: str,
    described: Callable[[T], str],
) -> None:
    """A message per row: a success when done, a warning when not."""
    for row_id, answer in answers.items():
        level = messages.SUCCESS if isinstance(answer, Done) else messages.WARNING
        model_admin.message_user(request, said(row_id, answer, did, described), level)


def operator_of(request: HttpRequest) -> str:
    """Who an action is audited as: the signed-in user's name."""
    user: Any = request.user
    return str(user.get_username())


def record_entry(request: HttpRequest, action: str, scope: str, key: str, seen: Seen) -> AuditEntry:
    """The audit row of an action on a record seen at ``seen`` (the store fills in after)."""
    return AuditEntry(operator_of(request), action, record_target(scope, key), seen_state(seen))


def allowed(request: HttpRequest, permission: str) -> bool:
    """Whether the request's user holds ``permission`` (a superuser holds every one)."""
    user: Any = request.user
    return bool(user.has_perm(permission))


@contextmanager
def outbox_engine() -> Iterator[Any]:
    """A sync engine on the database of MIDENG's ``database`` alias, disposed after."""
    engine = engine_for(database_url(config().database))
    try:
        yield engine
    finally:
        engine.dispose()


class ReadOnly(admin.ModelAdmin):  # type: ignore[type-arg]
    """Nothing added, changed or deleted here, by anyone."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        # A POST naming an action this user may not take is refused outright (the admin
        # would otherwise ignore it, or say "no action selected"): nothing is done.
        action = request.POST.get("action") if request.method == "POST" else None
        if action is not None and action not in self.get_actions(request):
            raise PermissionDenied(f"not allowed: {action}")
        return super().changelist_view(request, extra_context)


# -- the outbox ----------------------------------------------------------------------------
class OutboxStateFilter(admin.SimpleListFilter):
    """Rows by state: dead, pending, sent."""

    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(state), name) for state, name in dead.STATES.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset if value is None else queryset.filter(state=int(value))


#: The choices of "pending for longer than": seconds and their name.
PENDING_AGES = {"60": "1 minute", "600": "10 minutes", "3600": "1 hour", "86400": "1 day"}


class PendingOlderThan(admin.SimpleListFilter):
    """Pending rows written longer ago than a choice: the relay is behind or down."""

    title = "pending for longer than"
    parameter_name = "pending_older_than"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(PENDING_AGES.items())

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None or value not in PENDING_AGES:
            return queryset
        older: QuerySet[Any] = queryset.filter(
            Q(state=PENDING) & Q(created_at__lt=time.time() - float(value))
        )
        return older


def requeue_seen(request: HttpRequest) -> list[dead.SeenRow]:
    """The rows selected, each with the attempts the list showed of it dead (a row not shown
    dead, or not shown at all, as -1: it answers ``Changed``)."""
    seen = seen_values(request, selected(request))
    return [
        dead.SeenRow(row_id, int(value) if value is not None and value.isdigit() else -1)
        for row_id, value in seen.items()
    ]


def row_now(row: dead.OutboxRow) -> str:
    return f"{dead.state_name(row.state)}, attempts {row.attempts}"


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ReadOnly):
    """The outbox's rows: dead ones to requeue, pending ones the relay has not sent."""

    list_display = (
        "id",
        "destination",
        "aggregateid",
        "seq",
        "state_name",
        "attempts_seen",
        "age",
        "error_preview",
    )
    list_filter = (OutboxStateFilter, PendingOlderThan, "destination")
    search_fields = ("=id", "aggregateid", "=request_id", "destination")
    ordering = ("created_at",)
    actions = ("requeue",)
    readonly_fields = ("payload_preview",)
    exclude = ("payload",)

    @admin.display(description="state")
    def state_name(self, row: OutboxMessage) -> str:
        return dead.state_name(row.state)

    @admin.display(description="attempts")
    def attempts_seen(self, row: OutboxMessage) -> str:
        # What the operator sees is what a requeue is conditional on: a dead row's attempts,
        # else -1 (not dead when seen), posted with the list's form.
        carried = row.attempts if row.state == DEAD else -1
        return format_html("{}{}", row.attempts, seen_field(row.id, carried))

    @admin.display(description="age")
    def age(self, row: OutboxMessage) -> str:
        return ago(row.created_at)

    @admin.display(description="last error")
    def error_preview(self, row: OutboxMessage) -> str:
        return preview(row.last_error)

    @admin.display(description="payload")
    def payload_preview(self, row: OutboxMessage) -> str:
        return preview(row.payload, 2000)

    def has_requeue_outbox_permission(self, request: HttpRequest) -> bool:
        return allowed(request, "mideng.requeue_outbox")

    @admin.action(permissions=["requeue_outbox"], description="Requeue selected dead rows")
    def requeue(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
        seen = requeue_seen(request)
        confirmed = request.POST.get(CONFIRMED) == "yes"
        with outbox_engine() as engine:
            answers = dead.requeue(
                engine,
                seen,
                dry_run=not confirmed,
                table=config().outbox,
                operator=operator_of(request),
            )
        if not confirmed:
            return confirmation(
                self,
                request,
                action="requeue",
                title="Requeue dead outbox rows",
                question="A dry run, as of now (nothing changed yet):",
                lines=[said(i, a, "Would requeue", row_now) for i, a in answers.items()],
                seen={s.id: str(s.attempts) for s in seen},
                confirm="Yes, requeue them",
            )
        tell(self, request, answers, "Requeued", row_now)
        return None


# -- records -------------------------------------------------------------------------------
def record_ident(scope: str, key: str) -> str:
    """A record's name in the list's form: its scope and key, unambiguous whatever they hold."""
    return json.dumps([scope, key])


def record_of(ident: str) -> tuple[str, str] | None:
    """The scope and key an ident names (None: not one the list makes)."""
    try:
        scope, key = json.loads(ident)
    except (ValueError, TypeError):
        return None
    return (scope, key) if isinstance(scope, str) and isinstance(key, str) else None


#: What a record is asked for as when the page carried nothing (or nothing sensible) of it:
#: a fence no record has, so the answer is ``Changed`` (or ``Gone``), nothing done.
UNSEEN = Seen(Status.PROCESSING, -1)


def seen_record(value: str | None) -> Seen:
    """What the list showed of a record (``"<status> <fence>"``), else ``UNSEEN``."""
    status, _, fence = (value or "").partition(" ")
    if status not in {s.value for s in Status} or not fence.isdigit():
        return UNSEEN
    return Seen(Status(status), int(fence))


def on_each(
    seen: dict[str, str | None], act: Callable[[str, str, str | None], Answer[T]]
) -> dict[str, Answer[T]]:
    """``act`` on each row selected (named by scope and key), by its label."""
    answers: dict[str, Answer[T]] = {}
    for ident, value in seen.items():
        named = record_of(ident)
        if named is not None:  # else not a row a list shows: nothing to act on
            answers[f"{named[0]} / {named[1]}"] = act(named[0], named[1], value)
    return answers


def seen_line(ident: str, value: str | None) -> str:
    """A selected record on the confirmation page: as the list showed it."""
    named = record_of(ident)
    label = ident if named is None else f"{named[0]} / {named[1]}"
    seen = seen_record(value)
    return (
        f"{label}: not shown"
        if seen is UNSEEN
        else f"{label}: {seen.status.value}, fence {seen.fence}"
    )


def record_now(record: Record) -> str:
    return f"{record.status.value}, fence {record.fence}"


def keyed_checkbox(obj: Any) -> SafeString:
    """A row's check box naming it by its scope and key: the listing model's one-column key
    is not unique."""
    return format_html(
        '<input type="checkbox" name="{}" value="{}" class="action-select" '
        'aria-label="Select this row">',
        ACTION_CHECKBOX_NAME,
        record_ident(obj.scope, obj.key),
    )


class LeaseExpired(admin.SimpleListFilter):
    """Processing records whose holder's lease ran out: it died or hangs."""

    title = "lease"
    parameter_name = "lease"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("expired", "expired (processing)")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() != "expired":
            return queryset
        lapsed: QuerySet[Any] = queryset.filter(
            status=Status.PROCESSING.value, lease_until__lt=time.time()
        )
        return lapsed


class StatusFilter(admin.SimpleListFilter):
    """Records by status: UNKNOWN ones are waiting for an operator."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(s.value, s.value.upper() if s is Status.UNKNOWN else s.value) for s in Status]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        chosen: QuerySet[Any] = queryset.filter(status=value)
        return chosen


@admin.register(RecordListing)
class RecordAdmin(ReadOnly):
    """The records: stuck and UNKNOWN ones to resolve or release."""

    list_display = (
        "scope",
        "key",
        "status_seen",
        "fence",
        "attempts",
        "lease_left",
        "request_id",
        "result_preview",
    )
    list_display_links = None
    list_filter = (StatusFilter, LeaseExpired)
    search_fields = ("scope", "key", "=request_id")
    ordering = ("scope", "key")
    actions = ("resolve_not_happened", "release")

    def action_checkbox(self, obj: Any) -> SafeString:
        return keyed_checkbox(obj)

    @admin.display(description="status")
    def status_seen(self, row: RecordListing) -> str:
        ident = record_ident(row.scope, row.key)
        return format_html("{}{}", row.status, seen_field(ident, f"{row.status} {row.fence}"))

    @admin.display(description="lease left")
    def lease_left(self, row: RecordListing) -> str:
        if row.status != Status.PROCESSING.value or row.lease_until is None:
            return "-"
        left = row.lease_until - time.time()
        return f"{left:.0f} s" if left > 0 else f"expired {-left:.0f} s ago"

    @admin.display(description="result")
    def result_preview(self, row: RecordListing) -> str:
        return preview(row.result if row.result is not None else row.error)

    def has_resolve_record_permission(self, request: HttpRequest) -> bool:
        return allowed(request, "mideng.resolve_record")

    def has_release_record_permission(self, request: HttpRequest) -> bool:
        return allowed(request, "mideng.release_record")

    @admin.action(permissions=["resolve_record"], description="Resolve selected: it did not happen")
    def resolve_not_happened(
        self, request: HttpRequest, queryset: QuerySet[Any]
    ) -> HttpResponse | None:
        return self._on_records(
            request,
            "resolve_not_happened",
            "Resolved as not happened",
            lambda scope, key, seen: resolve_record(
                guard(),
                scope,
                key,
                seen,
                failed=True,
                audit=record_entry(request, "resolve", scope, key, seen),
            ),
        )

    @admin.action(permissions=["release_record"], description="Release selected")
    def release(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
        return self._on_records(
            request,
            "release",
            "Released",
            lambda scope, key, seen: release_record(
                guard(), scope, key, seen, audit=record_entry(request, "release", scope, key, seen)
            ),
        )

    def _on_records(
        self,
        request: HttpRequest,
        action: str,
        did: str,
        act: Callable[[str, str, Seen], Answer[Record]],
    ) -> HttpResponse | None:
        """Ask first (what was seen of each record), then act on each while it is still so."""
        seen = seen_values(request, selected(request))
        if request.POST.get(CONFIRMED) != "yes":
            return confirmation(
                self,
                request,
                action=action,
                title=f"{did}: are you sure?",
                question=f"{did}, each only while it is still as you saw it:",
                lines=[seen_line(ident, value) for ident, value in seen.items()],
                seen=seen,
                confirm="Yes",
            )
        answers = on_each(seen, lambda scope, key, value: act(scope, key, seen_record(value)))
        tell(self, request, answers, did, record_now)
        return None


# -- operations and their steps ------------------------------------------------------------
def operation_now(scope: str, key: str) -> PendingOperation | None:
    """An operation as judged now (its state, its record's fence), None if it is gone."""
    made = guard()
    entry = store_of(made).operation(scope, key)
    return None if entry is None else judge(made, entry, time.time())


def seen_text(item: PendingOperation) -> str:
    """What the list carries of an operation: ``"<state> <fence>"`` (``-``: no record)."""
    fence = item.seen.fence
    return f"{item.state.value} {'-' if fence is None else fence}"


def seen_operation(value: str | None) -> SeenOperation:
    """What the list showed of an operation, else a state and fence it never has (Changed)."""
    state, _, fence = (value or "").partition(" ")
    if state not in {s.value for s in OperationState} or not (fence.isdigit() or fence == "-"):
        return SeenOperation(OperationState.DONE, -1)
    return SeenOperation(OperationState(state), None if fence == "-" else int(fence))


def operation_said(item: PendingOperation) -> str:
    fence = item.seen.fence
    return f"{item.state.value}, fence {'-' if fence is None else fence}"


@admin.register(OperationListing)
class OperationAdmin(ReadOnly):
    """Multi-step operations: their state, steps, and a reconcile to run one again."""

    list_display = ("scope", "key", "state_seen", "began", "steps_link", "arguments_preview")
    list_display_links = None
    search_fields = ("scope", "key")
    ordering = ("at",)
    actions = ("reconcile",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        operations: QuerySet[Any] = super().get_queryset(request).filter(step="")
        return operations

    def action_checkbox(self, obj: Any) -> SafeString:
        return keyed_checkbox(obj)

    @admin.display(description="state")
    def state_seen(self, row: OperationListing) -> str:
        item = operation_now(row.scope, row.key)
        if item is None:
            return "gone"
        ident = record_ident(row.scope, row.key)
        return format_html("{}{}", operation_said(item), seen_field(ident, seen_text(item)))

    @admin.display(description="began")
    def began(self, row: OperationListing) -> str:
        return ago(row.at)

    @admin.display(description="steps")
    def steps_link(self, row: OperationListing) -> str:
        url = reverse("admin:mideng_steplisting_changelist")
        return format_html(
            '<a href="{}?{}">steps</a>', url, urlencode({"scope": row.scope, "key": row.key})
        )

    @admin.display(description="arguments")
    def arguments_preview(self, row: OperationListing) -> str:
        return preview(row.result)

    def has_reconcile_operation_permission(self, request: HttpRequest) -> bool:
        return allowed(request, "mideng.reconcile_operation")

    @admin.action(
        permissions=["reconcile_operation"], description="Reconcile selected: run them again"
    )
    def reconcile(self, request: HttpRequest, queryset: QuerySet[Any]) -> HttpResponse | None:
        seen = seen_values(request, selected(request))
        if request.POST.get(CONFIRMED) != "yes":
            return confirmation(
                self,
                request,
                action="reconcile",
                title="Reconcile: are you sure?",
                question="Run each again, only while it is still as you saw it:",
                lines=[seen_line_of_operation(ident, value) for ident, value in seen.items()],
                seen=seen,
                confirm="Yes",
            )

        def rerun(scope: str, key: str, value: str | None) -> Answer[Any]:
            seen = seen_operation(value)
            answer = guard().reconcile_operation(scope, key, seen)
            store = guard().store
            if isinstance(answer, Done) and isinstance(store, AuditStore):
                # After the run, not with it: a reconcile runs the operation's function.
                store.add_audit(answer.now.audited(operator_of(request), seen))
            return answer

        answers = on_each(seen, rerun)
        for label, answer in answers.items():
            if isinstance(answer, Done):
                outcome = answer.now
                text = f"Reconciled {label}: {outcome.outcome.value} {outcome.detail}".rstrip()
                self.message_user(request, text, messages.SUCCESS)
            else:
                tell(self, request, {label: answer}, "Reconciled", operation_said)
        return None


def seen_line_of_operation(ident: str, value: str | None) -> str:
    named = record_of(ident)
    label = ident if named is None else f"{named[0]} / {named[1]}"
    return f"{label}: {value or 'not shown'}"


@admin.register(StepListing)
class StepAdmin(ReadOnly):
    """The steps kept: an operation's page (``?scope=…&key=…``) lists its own."""

    list_display = ("scope", "key", "step_name", "at_time", "result_preview")
    list_display_links = None
    search_fields = ("scope", "key", "step")
    ordering = ("scope", "key", "at")
    actions = ()

    @admin.display(description="step")
    def step_name(self, row: StepListing) -> str:
        return row.step or "(the operation: its arguments)"

    @admin.display(description="at")
    def at_time(self, row: StepListing) -> str:
        return ago(row.at)

    @admin.display(description="result")
    def result_preview(self, row: StepListing) -> str:
        return preview(row.result)


# -- the audit -----------------------------------------------------------------------------
class AuditAdmin(ReadOnly):
    """Operators' actions, newest first: read here, never changed (mideng only adds rows)."""

    list_display = ("at_time", "operator", "action", "target", "state_before", "state_after")
    list_display_links = None
    list_filter = ("action",)
    search_fields = ("operator", "target")
    ordering = ("-id",)
    actions = ()

    @admin.display(description="at")
    def at_time(self, row: RecordAudit | OutboxAudit) -> str:
        return ago(row.at)


admin.site.register(RecordAudit, AuditAdmin)
admin.site.register(OutboxAudit, AuditAdmin)
