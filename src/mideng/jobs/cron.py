"""Five-field cron expressions, read once and asked for fire times in a time zone.

``minute hour day-of-month month day-of-week``, as in crontab(5): ``*``, numbers, ranges
``a-b``, steps ``*/n`` and ``a-b/n`` and ``a/n``, lists ``a,b``, month and weekday names
(``jan``, ``mon``), weekday 0 or 7 for Sunday, and the nicknames ``@hourly``, ``@daily``
(``@midnight``), ``@weekly``, ``@monthly``, ``@yearly`` (``@annually``). When both the day of
month and the day of week are restricted, a day matching either fires (crontab's rule).

The fields name wall-clock times in the expression's zone. Across a daylight-saving change:
a wall time the change skips (02:30 when clocks jump from 02:00 to 03:00) fires at the
instant it would have been without the jump (03:30 summer time, one hour of the gap later);
a wall time the change repeats (02:30 when clocks fall back from 03:00 to 02:00) fires once,
at its first occurrence. Two wall times that land on one instant fire once. These are
APScheduler 3's CronTrigger's answers, which the tests compare against.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone, tzinfo

from mideng.errors import ConfigurationError

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_NICKNAMES = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
# A wall-clock time is at most this far from the UTC instant it names (UTC-12 .. UTC+14), plus
# an hour of daylight saving: where to start looking for the wall times around an instant.
_WIDEST_OFFSET = timedelta(hours=15)
# How far to look for the next match: an expression that can never fire (``0 0 30 2 *``)
# fails after this many years instead of looping forever; 29 February on a given weekday
# comes back within 28 years.
_YEARS = 30


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    names_from: int = 0


_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day of month", 1, 31),
    _Field("month", 1, 12, _MONTHS, 1),
    _Field("day of week", 0, 7, _DAYS, 0),
)


def _number(text: str, field: _Field, expression: str) -> int:
    lowered = text.lower()
    if lowered in field.names:
        return field.names.index(lowered) + field.names_from
    if not text.isdigit():
        raise ConfigurationError(f"cron {expression!r}: {text!r} is not a {field.name}")
    value = int(text)
    if not field.low <= value <= field.high:
        raise ConfigurationError(
            f"cron {expression!r}: {field.name} {value} is outside {field.low}-{field.high}"
        )
    return value


def _values(text: str, field: _Field, expression: str) -> frozenset[int]:
    found: set[int] = set()
    for part in text.split(","):
        span, _, step_text = part.partition("/")
        step = 1
        if step_text:
            if not step_text.isdigit() or int(step_text) == 0:
                raise ConfigurationError(f"cron {expression!r}: bad step in {part!r}")
            step = int(step_text)
        if span == "*":
            low, high = field.low, field.high
        elif "-" in span:
            first, _, last = span.partition("-")
            low, high = _number(first, field, expression), _number(last, field, expression)
            if low > high:
                raise ConfigurationError(f"cron {expression!r}: range {span!r} runs backwards")
        else:
            low = _number(span, field, expression)
            high = field.high if step_text else low  # "5/15": from 5 to the end, every 15
        found.update(range(low, high + 1, step))
    return frozenset(found)


@dataclass(frozen=True)
class CronExpression:
    """One parsed expression: the values each field allows."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday .. 6 = Saturday
    days_restricted: bool
    weekdays_restricted: bool

    @classmethod
    def parse(cls, text: str) -> CronExpression:
        if not isinstance(text, str):
            raise ConfigurationError(f"a cron expression is a string, got {type(text).__name__}")
        spelled = _NICKNAMES.get(text.strip().lower(), text)
        parts = spelled.split()
        if len(parts) != len(_FIELDS):
            raise ConfigurationError(
                f"cron {text!r}: five fields (minute hour day-of-month month day-of-week), "
                f"got {len(parts)}"
            )
        minute, hour, day, month, weekday = (
            _values(part, field, text) for part, field in zip(parts, _FIELDS, strict=True)
        )
        return cls(
            text,
            minute,
            hour,
            day,
            month,
            frozenset(d % 7 for d in weekday),
            not parts[2].startswith("*"),
            not parts[4].startswith("*"),
        )

    def matches_day(self, day: date) -> bool:
        in_month = day.day in self.days
        in_week = day.isoweekday() % 7 in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return in_month or in_week
        return in_month and in_week

    def walls_after(self, start: datetime) -> Iterator[datetime]:
        """The naive wall-clock times that match, strictly after ``start``, in order."""
        day = start.date()
        limit = day.replace(year=day.year + _YEARS, day=1)
        first_minute = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
        while day < limit:
            if day.month not in self.months:
                day = _first_of_next_month(day)
                continue
            if self.matches_day(day):
                for hour in sorted(self.hours):
                    for minute in sorted(self.minutes):
                        wall = datetime(day.year, day.month, day.day, hour, minute)
                        if wall >= first_minute:
                            yield wall
            day += timedelta(days=1)
        raise ConfigurationError(f"cron {self.text!r} never fires within {_YEARS} years")

    def walls_before(self, end: datetime) -> Iterator[datetime]:
        """The naive wall-clock times that match, at or before ``end``, latest first."""
        day = end.date()
        limit = day.replace(year=day.year - _YEARS, day=1)
        while day > limit:
            if day.month not in self.months:
                day = day.replace(day=1) - timedelta(days=1)
                continue
            if self.matches_day(day):
                for hour in sorted(self.hours, reverse=True):
                    for minute in sorted(self.minutes, reverse=True):
                        wall = datetime(day.year, day.month, day.day, hour, minute)
                        if wall <= end:
                            yield wall
            day -= timedelta(days=1)
        raise ConfigurationError(f"cron {self.text!r} never fired within {_YEARS} years")


def _first_of_next_month(day: date) -> date:
    return date(day.year + day.month // 12, day.month % 12 + 1, 1)


def instant(wall: datetime, zone: tzinfo) -> datetime:
    """The UTC instant a naive wall time names in ``zone``: a skipped time as if the clocks
    had not jumped yet, a repeated one at its first occurrence (fold 0 in both cases)."""
    return wall.replace(tzinfo=zone, fold=0).astimezone(timezone.utc)


@dataclass(frozen=True)
class CronTimes:
    """An expression in a zone: the fire instants (UTC) around a given instant."""

    expression: CronExpression
    zone: tzinfo

    def after(self, moment: datetime) -> datetime:
        """The first fire instant strictly after ``moment`` (an aware datetime)."""
        # Wall times map to instants in order (fold 0 never goes back), but the wall time of
        # ``moment`` itself may be ahead of an instant still to come (in a repeated hour), so
        # the walk starts early enough to meet every candidate.
        start = moment.astimezone(self.zone).replace(tzinfo=None) - _WIDEST_OFFSET
        for wall in self.expression.walls_after(start):
            fire = instant(wall, self.zone)
            if fire > moment:
                return fire
        raise AssertionError("walls_after ends by raising")  # pragma: no cover

    def at_or_before(self, moment: datetime) -> datetime:
        """The latest fire instant at or before ``moment``."""
        end = moment.astimezone(self.zone).replace(tzinfo=None) + _WIDEST_OFFSET
        for wall in self.expression.walls_before(end):
            fire = instant(wall, self.zone)
            if fire <= moment:
                return fire
        raise AssertionError("walls_before ends by raising")  # pragma: no cover
