"""The lines of operations, consumers, brokers and the outbox keep their loggers, levels and
texts, and carry their fields; those written from an except block carry its traceback."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from mideng.context import request_id_scope
from mideng.observability import logs

ERROR = RuntimeError("broker down")

# (the line, its logger, level, the start of its text, scope, key, outcome, has a traceback)
LINES: list[tuple[Callable[[], None], str, int, str, str | None, str | None, str, bool]] = [
    (
        lambda: logs.steps_kept("payments", "p-1", ERROR),
        "mideng",
        logging.WARNING,
        "operation payments:p-1 completed",
        "payments",
        "p-1",
        "steps_kept",
        False,
    ),
    (
        lambda: logs.stale_task("stock", "s-2", "running for 90.0s, over 60s"),
        "mideng",
        logging.WARNING,
        "stale task stock:s-2: running",
        "stock",
        "s-2",
        "stale",
        False,
    ),
    (
        lambda: logs.consumer_attempt_failed("orders", "o-3", 2, ERROR),
        "mideng",
        logging.WARNING,
        "mideng consumer orders:o-3 attempt 2 raised",
        "orders",
        "o-3",
        "attempt_failed",
        False,
    ),
    (
        lambda: logs.consumer_dead_letters("m-4", "out of attempts"),
        "mideng",
        logging.ERROR,
        "mideng consumer dead-letters message 'm-4'",
        None,
        None,
        "dead_letter",
        False,
    ),
    (
        lambda: logs.consumer_failure_uncounted("orders", "o-5", ERROR),
        "mideng",
        logging.WARNING,
        "mideng consumer could not count the failure of orders:o-5",
        "orders",
        "o-5",
        "failure_uncounted",
        False,
    ),
    (
        lambda: logs.kafka_records_unhandled(
            3, "TopicPartition(topic='orders', partition=0)", ERROR
        ),
        "mideng.messaging",
        logging.ERROR,
        "consumer failed on 3 record(s) of TopicPartition",
        None,
        None,
        "consumer_failed",
        True,
    ),
    (
        lambda: logs.nats_dead_letter_copy_failed("orders.dead", "7", ERROR),
        "mideng.messaging",
        logging.ERROR,
        "dead-letter copy to 'orders.dead' failed",
        None,
        None,
        "dead_letter_failed",
        True,
    ),
    (
        lambda: logs.publish_failed("r-8", "order-8", 5, True, "no route"),
        "mideng.outbox",
        logging.WARNING,
        "outbox publish failed id=r-8 key=order-8 attempt=5 (dead)",
        None,
        "order-8",
        "dead_letter",
        False,
    ),
    (
        lambda: logs.publish_failed("r-9", None, 1, False, "timeout"),
        "mideng.outbox",
        logging.WARNING,
        "outbox publish failed id=r-9 key=None attempt=1:",
        None,
        None,
        "publish_failed",
        False,
    ),
    (
        lambda: logs.relay_batch_failed(ERROR),
        "mideng.outbox",
        logging.ERROR,
        "outbox relay batch failed",
        None,
        None,
        "relay_failed",
        True,
    ),
    (
        lambda: logs.statement_rollback_failed(ERROR),
        "mideng",
        logging.WARNING,
        "mideng could not roll back after a failed statement",
        None,
        None,
        "rollback_failed",
        False,
    ),
]


@pytest.mark.parametrize("line", LINES, ids=lambda line: line[3][:40])
def test_a_line_keeps_its_logger_level_text_and_fields(
    line: tuple[Callable[[], None], str, int, str, str | None, str | None, str, bool],
    caplog: pytest.LogCaptureFixture,
) -> None:
    write, logger, level, text, scope, key, outcome, traceback = line
    with caplog.at_level(logging.DEBUG, logger="mideng"), request_id_scope("req-1"):
        write()
    [record] = caplog.records
    assert (record.name, record.levelno) == (logger, level)
    assert record.getMessage().startswith(text), record.getMessage()
    assert record.__dict__["mideng_scope"] == scope
    assert record.__dict__["mideng_key"] == key
    assert record.__dict__["mideng_outcome"] == outcome
    assert record.__dict__["mideng_request_id"] == "req-1"
    assert (record.exc_info is not None and record.exc_info[1] is ERROR) == traceback
