"""The operator views answer with types: an operation's state and reconcile's outcome are enums
that are also their words, so code comparing, printing or encoding the words keeps working."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mideng.core.record import Record, Status
from mideng.operations import OperationState, Reconciled, ReconcileOutcome
from mideng.operations.pending import state_of

NOW = 100.0


def _record(status: Status, **fields: Any) -> Record:
    return Record("s", "k", status, 1, "o1", expires_at=500.0, **fields)


@pytest.mark.parametrize(
    ("record", "state"),
    [
        (None, OperationState.RELEASED),
        (_record(Status.SUCCEEDED), OperationState.DONE),
        (_record(Status.PROCESSING, lease_until=NOW + 5), OperationState.RUNNING),
        (_record(Status.PROCESSING, lease_until=NOW - 5), OperationState.EXPIRED),
        (_record(Status.UNKNOWN), OperationState.UNKNOWN),
        (_record(Status.FAILED), OperationState.RELEASED),
        (_record(Status.FAILED, error=b"{}", attempts=1), OperationState.RETRYING),
        (_record(Status.FAILED, error=b"{}", attempts=3), OperationState.FAILED),
    ],
)
def test_state_of_answers_an_operation_state(record: Record | None, state: OperationState) -> None:
    assert state_of(record, NOW, 3) is state


def test_the_answers_are_their_words() -> None:
    assert state_of(_record(Status.SUCCEEDED), NOW, 3) == "done"
    assert {"expired": 1}[OperationState.EXPIRED] == 1  # hashed as the word
    assert f"{OperationState.RUNNING} {ReconcileOutcome.CLEARED:>8}" == "running  cleared"
    row = Reconciled("s", "k", ReconcileOutcome.FINISHED, "'ok'")
    assert json.dumps(row.__dict__) == (
        '{"scope": "s", "key": "k", "outcome": "finished", "detail": "\'ok\'"}'
    )
    assert OperationState("unknown") is OperationState.UNKNOWN
