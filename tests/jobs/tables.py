"""The storm test's business tables: a row per slot written with the run's fence, a row per
run saying whether that write was applied, and a row per run started."""

from __future__ import annotations

from sqlalchemy import Boolean, Column, Integer, MetaData, String, Table


def storm_tables(suffix: str, metadata: MetaData | None = None) -> tuple[Table, Table, Table]:
    md = metadata if metadata is not None else MetaData()
    slots = Table(
        f"job_slots_{suffix}",
        md,
        Column("slot", String(40), primary_key=True),
        Column("pid", Integer),
        Column("fence", Integer),
    )
    runs = Table(
        f"job_runs_{suffix}",
        md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("slot", String(40), nullable=False),
        Column("pid", Integer, nullable=False),
        Column("fence", Integer, nullable=False),
        Column("applied", Boolean, nullable=False),
    )
    starts = Table(
        f"job_starts_{suffix}",
        md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("slot", String(40), nullable=False),
        Column("pid", Integer, nullable=False),
        Column("fence", Integer, nullable=False),
    )
    return slots, runs, starts
