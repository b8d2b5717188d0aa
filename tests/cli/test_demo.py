"""``mideng demo``: the payment story through every layer, its ledger read from the output.

With mideng the ledger is one payment's (1 coupon, 99 points, 9 of 10 units left, 1 SMS, 1
settlement); the same shop without mideng pays out what every retry, redelivery and instance
ran: three callbacks passed "already paid?" (3 events), each event's delivery took stock and
notified again (the message whose worker was SIGKILLed after the SMS came twice), and both
instances settled. mideng's notifier is an OperationConsumer: its first delivery's worker is
SIGKILLed after the SMS step, and a redelivery takes the operation over and resumes it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from mideng.cli import main
from tests.brokers import AMQP_URL, NATS_URL, KafkaBroker, kafka_broker  # noqa: F401
from tests.services import REDIS_URL, need

README = Path(__file__).resolve().parents[2] / "README.md"
POSTGRES = "postgresql://root@127.0.0.1:5432/test"
MYSQL = "mysql://root@127.0.0.1:3306/test"

#: The ledger's rows: one payment means | with mideng | without mideng.
LEDGER = {
    "order status": ("PAID", "PAID", "PAID"),
    "coupons issued": ("1", "1", "3"),
    "points added": ("99", "99", "297"),
    "stock left (of 10)": ("9", "9", "6"),
    "SMS sent": ("1", "1", "4"),
    "settlements booked": ("1", "1", "2"),
}
#: What README.md says the demo prints, figure by figure.
SAID = re.compile(
    r"the ledger: (\d+) coupons?, (\d+) points, (\d+) SMS and (\d+) units of stock left "
    r"without mideng against (\d+) coupons?, (\d+) points, (\d+) SMS and (\d+) units? left with it"
)


def ledger(output: str) -> dict[str, tuple[str, ...]]:
    rows = {}
    for label in LEDGER:
        found = re.search(rf"│ {re.escape(label)} +│ +(\w+) │ +(\w+) │ +(\w+) │", output)
        assert found is not None, f"no ledger row {label!r} in:\n{output}"
        rows[label] = found.groups()
    return rows


def played(*args: str) -> str:
    # Wide enough that no cell of the layer table wraps.
    result = CliRunner().invoke(main, ["demo", *args], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def printed() -> str:
    return played()


def test_the_default_needs_no_server_and_its_ledger_is_exact(printed: str) -> None:
    assert ledger(printed) == LEDGER
    assert "With mideng the ledger is exact" in printed
    # Each layer's line: what arrived, what ran, what was deduplicated.
    flat = " ".join(printed.split())
    assert "│ HTTP callback │ 4 callbacks │ 1 handler run │ 3 (replayed) │ 4 handler runs │" in flat
    assert "│ PAID + outbox row │ 1 handler run │ 2 outbox rows, relay sent 2 │" in flat
    assert re.search(r"│ stock consumer │ \d+ deliver(y|ies) │ stock taken 1x │ \d+ re", flat)
    # The operation's record counts two runs: the killed worker's and the take-over; the
    # notifier's redeliveries in between were held while the dead worker's lease ran out.
    assert re.search(
        r"│ notify operation │ 2 runs, 1 killed -9 │ SMS 1, coupon 1, points 1 │ "
        r"resumed after SMS \(\d+ held\) │",
        flat,
    )
    assert re.search(
        r"│ settlement job │ 2 instances │ 1 run │ 1 instance \((done|running)\) │", flat
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("services", "store", "broker"),
    [
        (("postgresql", "rabbitmq"), POSTGRES, AMQP_URL),
        (("mysql", "nats"), MYSQL, NATS_URL),
        (("redis",), REDIS_URL, REDIS_URL),
    ],
    ids=["postgresql-amqp", "mysql-nats", "redis-redis"],
)
def test_real_servers_end_with_the_same_ledger(
    services: tuple[str, ...], store: str, broker: str
) -> None:
    for service in services:
        need(service)
    assert ledger(played("--store", store, "--broker", broker)) == LEDGER


#: On Kafka a record sent back is read again from its offset, with the records after it in
#: its partition: the shop without mideng runs the two events fetched with the killed
#: worker's again (two more coupons, SMS and stock units). mideng's ledger is the same.
LEDGER_KAFKA = {
    **LEDGER,
    "coupons issued": ("1", "1", "5"),
    "points added": ("99", "99", "495"),
    "stock left (of 10)": ("9", "9", "4"),
    "SMS sent": ("1", "1", "6"),
}


@pytest.mark.slow
def test_kafka_ends_with_the_same_ledger(kafka_broker: KafkaBroker) -> None:  # noqa: F811
    assert ledger(played("--broker", kafka_broker.url)) == LEDGER_KAFKA


@pytest.mark.parametrize(
    ("option", "url", "said"),
    [
        ("--broker", "smtp://127.0.0.1", "no broker for 'smtp://127.0.0.1'"),
        ("--store", "ftp://x", "ftp"),
    ],
)
def test_a_url_it_cannot_use_is_one_usage_line(option: str, url: str, said: str) -> None:
    result = CliRunner().invoke(main, ["demo", option, url])
    assert result.exit_code == 2, result.output
    assert said in result.output
    assert "Traceback" not in result.output


def test_readme_quotes_what_the_demo_prints(printed: str) -> None:
    said = SAID.search(" ".join(README.read_text(encoding="utf-8").split()))
    assert said is not None, "README.md no longer states the demo's ledger"
    rows = ledger(printed)
    order = ("coupons issued", "points added", "SMS sent", "stock left (of 10)")
    without = tuple(rows[label][2] for label in order)
    with_it = tuple(rows[label][1] for label in order)
    assert tuple(said.groups()) == (*without, *with_it)
