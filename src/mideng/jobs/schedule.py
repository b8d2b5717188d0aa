"""When a job's slots start: every N seconds, or at a cron expression's times in a zone.

A slot is the start of one period, as seconds on the store's clock; hosts whose own clocks
disagree agree on it because they read the store's. ``slot_at(now)`` is the latest slot that
has started by ``now``, ``after(slot)`` the one that follows. A slot's key, the record key of
its run, is its start in UTC (``2026-12-07T20:30:00Z``).
"""

from __future__ import annotations

import math
import zoneinfo
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Protocol

from mideng.errors import ConfigurationError
from mideng.jobs.cron import CronExpression, CronTimes


class Schedule(Protocol):
    def slot_at(self, now: float) -> float:
        """The latest slot that started at or before ``now``."""

    def after(self, slot: float) -> float:
        """The first slot that starts after ``slot``."""

    def describe(self) -> str: ...


@dataclass(frozen=True)
class Every:
    """A slot every ``seconds`` (a whole number, at least 1), counted from the Unix epoch in
    UTC, so every host cuts time the same way: ``Every(3600)`` starts on the hour."""

    seconds: int

    def __post_init__(self) -> None:
        value = self.seconds
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(
                f"every= must be a whole number of seconds, at least 1: {value!r}"
            )

    def slot_at(self, now: float) -> float:
        return float(math.floor(now / self.seconds) * self.seconds)

    def after(self, slot: float) -> float:
        return self.slot_at(slot) + self.seconds

    def describe(self) -> str:
        return f"every {self.seconds}s"


class Cron:
    """The times of a five-field cron expression in ``zone`` (mideng.jobs.cron)."""

    def __init__(self, expression: str, zone: str = "UTC") -> None:
        self.expression = expression
        self.zone = zone
        self.times = CronTimes(CronExpression.parse(expression), _zone(zone))

    def __repr__(self) -> str:
        return f"Cron({self.expression!r}, {self.zone!r})"

    def slot_at(self, now: float) -> float:
        return self.times.at_or_before(_utc(now)).timestamp()

    def after(self, slot: float) -> float:
        return self.times.after(_utc(slot)).timestamp()

    def describe(self) -> str:
        return f"cron {self.expression!r} {self.zone}"


def _zone(name: str) -> tzinfo:
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, TypeError) as exc:
        raise ConfigurationError(f"unknown time zone {name!r}") from exc


def _utc(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, timezone.utc)


def every(value: float | timedelta) -> Every:
    """``every=`` as given: seconds or a timedelta, a whole number of seconds."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, float) and seconds.is_integer():
        seconds = int(seconds)
    return Every(seconds)  # type: ignore[arg-type]  # Every refuses what is not an int


def slot_key(slot: float) -> str:
    """The record key of a slot: its start in UTC, to the second."""
    return _utc(slot).strftime("%Y-%m-%dT%H:%M:%SZ")


def slot_time(slot: float) -> datetime:
    """A slot's start as an aware datetime in UTC."""
    return _utc(slot)
