"""``manage.py mideng_requeue`` in a child process, on SQLite and PostgreSQL: dead rows
requeued by id and by destination, a dry run changing nothing, a row changed meanwhile
reported with exit 1, the same JSON as ``mideng outbox requeue``, usage errors one line and
exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.contrib.django.outbox_rows import added, killed, states
from tests.contrib.django.project import fresh_database
from tests.contrib.django.test_commands import Shop

PENDING, SENT, DEAD = 0, 1, 2


@pytest.fixture(params=["sqlite", "postgresql"])
def shop(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Shop]:
    with fresh_database(request.param, tmp_path) as url:
        yield Shop(tmp_path, url)


def _dead_three(shop: Shop) -> list[str]:
    """Four rows to ``orders``, three of them dead (the last one sent)."""
    ids = added(shop.url, shop.outbox, "orders", ["order:1", "order:2", "order:3", "order:4"])
    killed(shop.url, shop.outbox, set(ids[:3]))
    assert [states(shop.url, shop.outbox)[i][0] for i in ids] == [DEAD, DEAD, DEAD, SENT]
    return ids


def test_dry_run_then_by_id_then_by_destination(shop: Shop) -> None:
    ids = _dead_three(shop)
    dry = shop.manage("mideng_requeue", "--destination", "orders", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        f"would requeue {ids[0]}",
        f"would requeue {ids[1]}",
        f"would requeue {ids[2]}",
        "would requeue 3 row(s)",
    ]
    assert [states(shop.url, shop.outbox)[i][0] for i in ids[:3]] == [DEAD] * 3

    one = shop.manage("mideng_requeue", ids[0], "--json")
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout) == {
        "dry_run": False,
        "requeued": 1,
        "rows": [{"id": ids[0], "outcome": "requeued", "state": "pending", "attempts": 0}],
    }
    rest = shop.manage("mideng_requeue", "--destination", "orders")
    assert rest.returncode == 0, rest.stderr
    assert rest.stdout.splitlines()[-1] == "requeued 2 row(s)"
    assert [states(shop.url, shop.outbox)[i] for i in ids] == [
        (PENDING, 0),
        (PENDING, 0),
        (PENDING, 0),
        (SENT, 0),  # a sent row counts no failed attempt
    ]


def test_a_row_not_dead_or_gone_is_changed_meanwhile_and_exit_1(shop: Shop) -> None:
    ids = _dead_three(shop)
    mixed = shop.manage("mideng_requeue", ids[0], ids[3], "no-such-row", "--json")
    assert mixed.returncode == 1, mixed.stderr
    assert [(r["id"], r["outcome"], r["state"]) for r in json.loads(mixed.stdout)["rows"]] == [
        (ids[0], "requeued", "pending"),
        (ids[3], "changed", "sent"),
        ("no-such-row", "gone", None),
    ]
    assert mixed.stderr.strip().splitlines() == [
        "CommandError: not every row asked for was requeued: changed meanwhile"
    ]
    again = shop.manage("mideng_requeue", ids[0])
    assert again.returncode == 1
    assert again.stdout.splitlines()[0] == f"changed meanwhile: {ids[0]} is pending, attempts 0"


def test_the_same_json_as_mideng_outbox_requeue(shop: Shop, tmp_path: Path) -> None:
    ids = _dead_three(shop)
    ours = shop.manage("mideng_requeue", ids[0], ids[3], "--dry-run", "--json")
    theirs = subprocess.run(
        [sys.executable, "-m", "mideng", "outbox", "requeue", "--db", shop.url, "--table",
         shop.outbox, ids[0], ids[3], "--dry-run", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert (ours.returncode, theirs.returncode) == (1, 1)
    assert json.loads(ours.stdout) == json.loads(theirs.stdout)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((), "give row IDs or --destination, not both and not neither"),
        (("x", "--destination", "d"), "give row IDs or --destination, not both and not neither"),
        (("--destination", "d", "--db", "mongo://db/x"), "mongo"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    shop = Shop(tmp_path, f"sqlite:///{tmp_path / 'shop.db'}")
    done = shop.manage("mideng_requeue", *args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_database_that_fails_is_one_line_and_exit_1(tmp_path: Path) -> None:
    shop = Shop(tmp_path, f"sqlite:///{tmp_path / 'shop.db'}")
    done = shop.manage("mideng_requeue", "x", "--db", "postgresql://nobody@127.0.0.1:1/none")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
