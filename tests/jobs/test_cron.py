"""Cron expressions: what they accept and refuse, crontab's rules, and their fire times —
against APScheduler 3's CronTrigger where both define them, and across daylight-saving
changes, where mideng's rule is written out below and APScheduler 3 differs."""

from __future__ import annotations

import zoneinfo
from datetime import datetime, timedelta, timezone

import pytest

from mideng.errors import ConfigurationError
from mideng.jobs.cron import CronExpression, CronTimes

UTC = timezone.utc


def times(expression: str, zone: str = "UTC") -> CronTimes:
    return CronTimes(CronExpression.parse(expression), zoneinfo.ZoneInfo(zone))


def fires(expression: str, zone: str, start: datetime, count: int) -> list[datetime]:
    found, moment, cron = [], start - timedelta(microseconds=1), times(expression, zone)
    for _ in range(count):
        moment = cron.after(moment)
        found.append(moment)
    return found


def at(zone: str, *wall: int, fold: int = 0) -> datetime:
    """The instant a wall time names in ``zone`` (``fold=1``: its second occurrence)."""
    year, month, day, hour, minute = wall
    naive = datetime(year, month, day, hour, minute)
    return naive.replace(tzinfo=zoneinfo.ZoneInfo(zone), fold=fold).astimezone(UTC)


@pytest.mark.parametrize(
    ("expression", "error"),
    [
        ("* * * *", "five fields"),
        ("* * * * * *", "five fields"),
        ("60 * * * *", "minute 60 is outside 0-59"),
        ("* 24 * * *", "hour 24"),
        ("* * 0 * *", "day of month 0"),
        ("* * * 13 *", "month 13"),
        ("* * * * 8", "day of week 8"),
        ("*/0 * * * *", "bad step"),
        ("5-1 * * * *", "runs backwards"),
        ("x * * * *", "'x' is not a minute"),
        ("* * * foo *", "not a month"),
        ("0 0 30 2 *", "never fires"),
    ],
)
def test_bad_expressions_are_refused_with_what_is_wrong(expression: str, error: str) -> None:
    with pytest.raises(ConfigurationError, match=error):
        times(expression).after(datetime(2026, 1, 1, tzinfo=UTC))


def test_an_expression_that_is_not_text_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="a string"):
        CronExpression.parse(5)  # type: ignore[arg-type]


def test_crontab_rules() -> None:
    start = datetime(2026, 6, 1, tzinfo=UTC)  # a Monday
    # Day of month and day of week both restricted: a day matching either fires.
    assert fires("0 0 13 * fri", "UTC", start, 3) == [
        datetime(2026, 6, 5, tzinfo=UTC),
        datetime(2026, 6, 12, tzinfo=UTC),
        datetime(2026, 6, 13, tzinfo=UTC),
    ]
    # Sunday is 0 and 7; names and numbers mix; "a/n" runs from a to the end.
    assert fires("0 12 * * 7", "UTC", start, 1) == fires("0 12 * * sun", "UTC", start, 1)
    assert fires("0 12 * * 0", "UTC", start, 1) == [datetime(2026, 6, 7, 12, tzinfo=UTC)]
    assert fires("50/5 9 * * *", "UTC", start, 3) == [
        datetime(2026, 6, 1, 9, m, tzinfo=UTC) for m in (50, 55)
    ] + [datetime(2026, 6, 2, 9, 50, tzinfo=UTC)]
    assert fires("@daily", "UTC", start, 1) == fires("0 0 * * *", "UTC", start, 1)
    assert fires("@hourly", "UTC", start, 2)[1] == datetime(2026, 6, 1, 1, tzinfo=UTC)
    # 29 February only in leap years.
    assert fires("0 0 29 2 *", "UTC", start, 2) == [
        datetime(2028, 2, 29, tzinfo=UTC),
        datetime(2032, 2, 29, tzinfo=UTC),
    ]


# Expressions APScheduler 3 reads as crontab does: weekdays by name (its numbers start on
# Monday) and never both day fields restricted (it requires both to match).
REFERENCE_EXPRESSIONS = [
    "*/30 * * * *",
    "0 * * * *",
    "30 2 * * *",
    "15 1-3 * * *",
    "0 9 * * mon-fri",
    "*/7 */5 * 3,10 *",
    "45 2 * * sun",
    "59 23 31 * *",
    "0 0 29 2 *",
    "5/20 2 * mar sun",
]
ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]


def _reference_after(trigger: object, moment: datetime) -> datetime:
    found = trigger.get_next_fire_time(None, moment + timedelta(microseconds=1))  # type: ignore[attr-defined]
    return found.astimezone(UTC)  # type: ignore[no-any-return]


def _ordinary(moment: datetime, zone: zoneinfo.ZoneInfo) -> bool:
    """Whether the day around ``moment`` has no clock change in ``zone``."""
    offsets = {(moment + timedelta(hours=h)).astimezone(zone).utcoffset() for h in range(-26, 27)}
    return len(offsets) == 1


@pytest.mark.parametrize("zone", ZONES)
def test_fire_times_agree_with_apscheduler_away_from_clock_changes(zone: str) -> None:
    cron_trigger = pytest.importorskip("apscheduler.triggers.cron")
    tz = zoneinfo.ZoneInfo(zone)
    compared = 0
    for expression in REFERENCE_EXPRESSIONS:
        trigger = cron_trigger.CronTrigger.from_crontab(expression, timezone=tz)
        ours = times(expression, zone)
        for day in range(0, 365, 7):
            for hour in (0, 7, 13, 22):
                moment = datetime(2026, 1, 1, hour, 17, tzinfo=UTC) + timedelta(days=day)
                expected = _reference_after(trigger, moment)
                if not (_ordinary(moment, tz) and _ordinary(expected, tz)):
                    continue
                assert ours.after(moment) == expected, (expression, zone, moment)
                assert ours.at_or_before(expected) == expected
                assert ours.at_or_before(expected - timedelta(seconds=1)) < expected
                compared += 1
    assert compared > 1000


def test_a_wall_time_the_clocks_skip_fires_as_if_they_had_not_jumped_yet() -> None:
    # Berlin, 29 March 2026: 02:00 CET becomes 03:00 CEST. 02:30 does not exist that day.
    start = datetime(2026, 3, 28, 12, tzinfo=UTC)
    assert fires("30 2 * * *", "Europe/Berlin", start, 2) == [
        at("Europe/Berlin", 2026, 3, 29, 3, 30),  # 02:30 CET, had it come: 03:30 CEST
        at("Europe/Berlin", 2026, 3, 30, 2, 30),
    ]
    # Every half hour: 02:00 and 02:30 land on 03:00 and 03:30, which fire once each.
    assert fires("*/30 * * * *", "Europe/Berlin", at("Europe/Berlin", 2026, 3, 29, 1, 30), 4) == [
        at("Europe/Berlin", 2026, 3, 29, 1, 30),
        at("Europe/Berlin", 2026, 3, 29, 3, 0),
        at("Europe/Berlin", 2026, 3, 29, 3, 30),
        at("Europe/Berlin", 2026, 3, 29, 4, 0),
    ]
    # Santiago, 6 September 2026: midnight does not exist; the daily job still runs that day.
    assert fires("0 0 * * *", "America/Santiago", datetime(2026, 9, 5, 12, tzinfo=UTC), 2) == [
        datetime(2026, 9, 6, 4, tzinfo=UTC),  # 00:00 -04, had it come: 01:00 -03
        at("America/Santiago", 2026, 9, 7, 0, 0),
    ]


def test_a_wall_time_the_clocks_repeat_fires_once_at_its_first_occurrence() -> None:
    # Berlin, 25 October 2026: 03:00 CEST becomes 02:00 CET; 02:00-02:59 come twice.
    start = datetime(2026, 10, 24, 12, tzinfo=UTC)
    assert fires("30 2 * * *", "Europe/Berlin", start, 2) == [
        at("Europe/Berlin", 2026, 10, 25, 2, 30, fold=0),  # 00:30 UTC, summer time
        at("Europe/Berlin", 2026, 10, 26, 2, 30),
    ]
    # Hourly: 02:00 fires once; the next fire is 03:00 CET, two hours of real time later.
    hourly = fires("0 * * * *", "Europe/Berlin", at("Europe/Berlin", 2026, 10, 25, 1, 0), 3)
    assert hourly == [
        datetime(2026, 10, 24, 23, tzinfo=UTC),
        datetime(2026, 10, 25, 0, tzinfo=UTC),
        datetime(2026, 10, 25, 2, tzinfo=UTC),
    ]
    # at_or_before from inside the repeated hour finds the first 02:30, not a later one.
    inside = at("Europe/Berlin", 2026, 10, 25, 2, 45, fold=1)
    assert times("30 2 * * *", "Europe/Berlin").at_or_before(inside) == hourly[1] + timedelta(
        minutes=30
    )


def test_apscheduler_3_fires_a_repeated_wall_time_twice_where_mideng_fires_it_once() -> None:
    """The documented difference (docs/jobs.md): a daily job at a repeated wall time runs
    twice that day under APScheduler 3's CronTrigger, once under mideng."""
    cron_trigger = pytest.importorskip("apscheduler.triggers.cron")
    tz = zoneinfo.ZoneInfo("Europe/Berlin")
    trigger = cron_trigger.CronTrigger.from_crontab("30 2 * * *", timezone=tz)
    first = _reference_after(trigger, datetime(2026, 10, 24, 12, tzinfo=UTC))
    second = _reference_after(trigger, first)
    assert first.date() == second.date()  # both on 25 October: 02:30 CEST and 02:30 CET
    ours = times("30 2 * * *", "Europe/Berlin")
    assert ours.after(first) == at("Europe/Berlin", 2026, 10, 26, 2, 30)
