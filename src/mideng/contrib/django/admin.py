"""Django's admin over mideng's tables: read-only pages, and operators' actions conditional on
what the operator saw.

No one may add, change or delete a row here (mideng writes its tables; a hand edit would break
the fences and per-key order they carry). Each action is gated by a custom permission of the
app (``mideng.requeue_outbox``); a staff user without it does not see the action, and a
forged POST naming it is refused (403), nothing done.

An action acts on the rows as the list showed them: the list carries, per row, what the
operator saw (an outbox row's failed attempts) in a hidden field of its form; the action's
confirmation page carries it on, and the action is done only while each row is still so
(mideng.outbox.dead). One row changed between the page and the POST is told "changed
meanwhile", nothing done to it. Texts from the tables (errors, payloads) are shown truncated
and escaped by Django's autoescape, never marked safe.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.html import format_html

from mideng.contrib.django.models import OutboxMessage
from mideng.contrib.django.settings import config, database_url
from mideng.core.answers import Answer, Changed, Done
from mideng.outbox import dead
from mideng.outbox.schema import DEAD, PENDING
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
        return f"{max(time.time() - row.created_at, 0.0):.0f} s"

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
            answers = dead.requeue(engine, seen, dry_run=not confirmed, table=config().outbox)
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
