"""Outbox rows in a test project's database: committed through ``Outbox.add``, some made dead
by a real relay whose publisher refuses them (max_attempts 1)."""

from __future__ import annotations

import asyncio
from typing import Any

import sqlalchemy as sa

from mideng.outbox import Backoff, Outbox, Relay
from tests.outbox.recording import Recording


def added(url: str, table: str, destination: str, keys: list[str]) -> list[str]:
    """Rows committed into ``table``, one per key: their ids."""
    engine = sa.create_engine(url)
    try:
        outbox = Outbox(engine, table=table)
        with engine.begin() as conn:
            return [outbox.add(conn, destination, {"order": key}, key=key) for key in keys]
    finally:
        engine.dispose()


def killed(url: str, table: str, ids: set[str]) -> None:
    """One relay pass: the rows ``ids`` fail their only attempt and are dead, the rest sent."""

    async def main() -> None:
        engine = sa.create_engine(url)
        publisher = Recording(fail=lambda message: message.message_id in ids)
        try:
            async with Relay(
                engine, publisher, table=table, listen=False, max_attempts=1, backoff=Backoff(0)
            ) as relay:
                await relay.batch()
        finally:
            engine.dispose()

    asyncio.run(main())


def states(url: str, table: str) -> dict[str, tuple[int, int]]:
    """Each row's (state, attempts), by id."""
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            rows: Any = conn.exec_driver_sql(f"SELECT id, state, attempts FROM {table}")
            return {str(row[0]): (int(row[1]), int(row[2])) for row in rows}
    finally:
        engine.dispose()
