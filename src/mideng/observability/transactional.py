"""What metrics and tracing see of transactional mode (mideng.guard.transaction): a block, and
each of its statements.

A block's statements run on the caller's connection, not through a store's operations, so the
store wrappers of ``store_metrics`` never see them: the block reports them here, into the same
series as a guarded call. Its claims count in ``mideng_claims_total`` (and take-overs in
``mideng_takeovers_total``), a statement that fails in ``mideng_store_errors_total`` with the
connection's statement kind as ``store`` (postgresql, mysql, mariadb, sqlite), statement
durations in ``mideng_store_call_seconds`` and the block's own, from its claim to storing its
result, in ``mideng_body_seconds``. A ``mideng.transaction`` span (the attributes of a
``mideng.call``) is current for the whole block, with a ``mideng.store.<operation>`` child
per statement.
"""

from __future__ import annotations

from time import monotonic
from types import TracebackType
from typing import Any

from mideng.observability import observers
from mideng.observability.recorder import Recorder, takes_over


class Statement:
    """One statement of a block: timed, its failure counted, a child span while tracing."""

    __slots__ = ("block", "kind", "operation", "span", "started")

    def __init__(self, block: Block, kind: str, operation: str) -> None:
        self.block = block
        self.kind = kind
        self.operation = operation
        self.span: Any = None
        self.started = 0.0

    def __enter__(self) -> Statement:
        block = self.block
        if block.span is not None and not block.labelled:
            block.span.set_attribute("mideng.store", self.kind)
            block.labelled = True
        if block.spans is not None:
            self.span = block.spans.store_call(self.operation, block.call.scope, self.kind)
            self.span.__enter__()
        self.started = monotonic()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        ended = monotonic()
        block = self.block
        block.seconds = ended - self.started
        if self.span is not None:
            self.span.__exit__(kind, exc, tb)
        rec = block.rec
        if rec is None:
            return
        scope = block.call.scope
        if exc is not None:
            if not isinstance(exc, GeneratorExit):  # the block's steps closed, not a failure
                rec.store_error(self.kind, self.operation)
        elif self.operation != "claim" and rec.durations:
            timed = rec.get("mideng_store_call_seconds", (scope, self.operation), True)
            rec.add(timed, block.seconds)
            if block.acquired_at is not None:
                body = rec.get("mideng_body_seconds", (scope,), True)
                rec.add(body, self.started - block.acquired_at)


class Block:
    """One transactional block as metrics and tracing see it; its ``with`` is its span."""

    __slots__ = ("acquired_at", "call", "labelled", "rec", "seconds", "span", "span_cm", "spans")

    def __init__(self, call: Any, rec: Recorder | None, spans: Any) -> None:
        self.call = call
        self.rec = rec
        self.spans = spans
        self.span: Any = None  # the block's span, while tracing
        self.span_cm: Any = None
        self.labelled = False  # whether the span has its store yet (known once a statement runs)
        self.seconds = 0.0  # the last statement's duration
        self.acquired_at: float | None = None

    def __enter__(self) -> Block:
        if self.spans is not None:
            self.span_cm = self.spans.call(self.call, "sql", name="mideng.transaction")
            self.span = self.span_cm.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.span_cm is not None:
            self.span_cm.__exit__(kind, exc, tb)

    def statement(self, kind: str, operation: str) -> Statement:
        return Statement(self, kind, operation)

    def claimed(self, req: Any, claim: Any) -> None:
        """The block's claim statement answered ``claim``."""
        outcome: str = claim.outcome._value_
        if self.spans is not None:
            self.spans.claimed(outcome, claim.record)
        rec = self.rec
        if rec is None:
            return
        if outcome == "acquired":
            self.acquired_at = monotonic()
            if takes_over(req, claim.record):
                rec.takeover(req.scope)
        rec.add(rec.get("mideng_claims", (req.scope, outcome), True), self.seconds)


def observe(call: Any) -> Block | None:
    """The block's observation, or None while metrics and tracing are both off."""
    rec, on = observers.metrics, observers.on
    if rec is None and on is None:
        return None
    assert rec is None or isinstance(rec, Recorder)
    return Block(call, rec, None if on is None else on.tracing)
