"""The nightly job: ``mideng jobs run --store $SHOP_DATABASE_URL shop.jobs:jobs`` on every
instance; each night's report is written once, whichever instances are up."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select

from mideng.jobs import JobContext, Jobs
from mideng.state import insert_once, update_fenced
from shop.tables import daily_sales, ledger, orders
from shop.wiring import engine

jobs = Jobs()


@jobs.job("daily_sales", cron="0 2 * * *", tz="UTC")
def report_daily_sales(context: JobContext) -> None:
    """The day before the slot: its paid orders and their amount, one row per day."""
    end = context.slot.replace(hour=0, minute=0, second=0, microsecond=0)
    start = end - timedelta(days=1)
    day = start.date().isoformat()
    with engine.begin() as conn:
        count, amount = conn.execute(
            select(func.count(), func.coalesce(func.sum(orders.c.amount), 0)).where(
                orders.c.paid_at >= start, orders.c.paid_at < end
            )
        ).one()
        insert_once(conn, daily_sales, {"day": day}, unique="day")
        # A paused holder whose slot was taken over writes nothing: the fence refuses it.
        written = update_fenced(
            conn,
            daily_sales,
            {"day": day},
            {"orders": count, "amount": amount},
            fence=context.fence,
        )
        if written.ok:
            conn.execute(
                ledger.insert().values(event="daily_sales", detail=f"{day}: {count} orders")
            )
