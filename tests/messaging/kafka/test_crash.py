"""The two crash points of a transactional consumer, each shown with a real SIGKILL there.

Before the commit: the handler's insert and the dedup record roll back with the dead
connection, so the redelivered message runs again, once. After the commit, before the ack:
the effect and the record are committed, the message is unacked; its redelivery finds the
record and is acked without running.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.storm import crash_case, tables
from tests.messaging.kafka.conftest import KafkaSide
from tests.services import POSTGRES_URL, need

pytestmark = pytest.mark.slow


def test_killed_before_commit_runs_again_once(kafka_side: KafkaSide, tmp_path: Path) -> None:
    need("postgresql")
    with tables(POSTGRES_URL) as db:
        result = crash_case(kafka_side, db, tmp_path, "before_commit")
    assert result.effects_at_kill == 0  # the insert was made, not committed
    assert len(result.effects) == 1
    assert result.effects[0] != result.killed_pid  # the redelivery ran it
    assert "outcome=replay" not in result.rerun_log


def test_killed_after_commit_is_acked_without_running(
    kafka_side: KafkaSide, tmp_path: Path
) -> None:
    need("postgresql")
    with tables(POSTGRES_URL) as db:
        result = crash_case(kafka_side, db, tmp_path, "after_commit")
    assert result.effects_at_kill == 1  # committed, not yet acked
    assert result.effects == [result.killed_pid]  # nobody ran it again
    assert "outcome=replay" in result.rerun_log  # the redelivery came and was a duplicate
