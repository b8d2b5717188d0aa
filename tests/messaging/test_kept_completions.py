"""The kept completions' bound: a long outage with messages that never come back (dead-lettered
or removed meanwhile) must not grow the consumer's memory without end."""

from __future__ import annotations

import logging

import pytest

from mideng.core.record import Ticket
from mideng.messaging.kept_completions import HELD_LIMIT, Unwritten
from mideng.stores.batch import Completion


def _completion(key: str) -> Completion:
    return Completion(Ticket("orders", key, "owner", 1), b"{}", "json", None)


def test_past_its_bound_the_oldest_completion_is_dropped_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kept = Unwritten("orders", limit=3)
    for key in ("a", "b", "c"):
        kept.hold(key, _completion(key))
    kept.hold("a", _completion("a"))  # held again: now the newest, so "b" is the oldest
    with caplog.at_level(logging.ERROR, logger="mideng"):
        kept.hold("d", _completion("d"))
        kept.hold("e", _completion("e"))
    assert len(kept) == 3
    assert [key for key in ("a", "b", "c", "d", "e") if key in kept] == ["a", "d", "e"]
    assert kept.dropped == 2
    dropped = [
        r for r in caplog.records if getattr(r, "mideng_outcome", None) == "completion_dropped"
    ]
    assert [(r.levelno, getattr(r, "mideng_key", None)) for r in dropped] == [
        (logging.ERROR, "b"),
        (logging.ERROR, "c"),
    ]
    assert kept.take("a").ticket.key == "a"
    assert "a" not in kept


def test_the_default_bound_is_large_enough_for_a_batch_of_any_broker() -> None:
    kept = Unwritten("orders")
    assert kept.limit == HELD_LIMIT >= 10_000
    for n in range(1000):
        kept.hold(f"k{n}", _completion(f"k{n}"))
    assert len(kept) == 1000
    assert kept.dropped == 0
