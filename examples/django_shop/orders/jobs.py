"""The nightly job: ``python manage.py run_jobs`` on every instance; each night's report is
written once, whichever instances are up (mideng.jobs: one claim per slot on the store)."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection, transaction
from django.db.models import Count, Sum

from mideng.jobs import JobContext, Jobs
from mideng.state import insert_once, update_fenced
from orders.models import DailySales, Ledger, Order

jobs = Jobs()


@jobs.job("daily_sales", cron="0 2 * * *", tz="UTC")
def report_daily_sales(context: JobContext) -> None:
    """The day before the slot: its paid orders and their amount, one row per day."""
    end = context.slot.replace(hour=0, minute=0, second=0, microsecond=0)
    start = end - timedelta(days=1)
    day = start.date().isoformat()
    with transaction.atomic():
        paid = Order.objects.filter(paid_at__gte=start, paid_at__lt=end).aggregate(
            count=Count("pk"), amount=Sum("amount")
        )
        count, amount = paid["count"], paid["amount"] or 0
        insert_once(connection, DailySales, {"day": day}, unique="day")
        # A paused holder whose slot was taken over writes nothing: the fence refuses it.
        written = update_fenced(
            connection,
            DailySales,
            {"day": day},
            {"orders": count, "amount": amount},
            fence=context.fence,
        )
        if written.ok:
            Ledger.objects.create(event=Ledger.Event.DAILY_SALES, detail=f"{day}: {count} orders")
