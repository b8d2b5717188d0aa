"""In-process store: a dict under a lock. For tests and single-process services."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from mideng.core import decide as rules
from mideng.core.audit import AuditEntry, AuditQuery, AuditRow
from mideng.core.record import Claim, ClaimRequest, Record, Resolution, Ticket
from mideng.stores.audit import AuditStore, audited
from mideng.stores.base import KEEP, Step, T, lease_lost
from mideng.stores.batch import LocalBatch
from mideng.stores.steps import LocalSteps
from mideng.stores.survey import LocalSurvey


class MemoryStore(LocalBatch, LocalSteps, LocalSurvey, AuditStore):
    offload_reason = "a dict under a lock: nothing blocks, so the async twins call the sync ones"
    blocking_io = False

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.url = "memory://"
        self._clock = clock
        self._lock = threading.Lock()
        self._data: dict[tuple[str, str], Record] = {}
        self._steps: dict[tuple[str, str], dict[str, tuple[bytes, str, float]]] = {}
        #: Operators' actions, oldest first (kept as long as the records: the process's life).
        self._audit: list[AuditRow] = []

    @classmethod
    def from_url(cls, url: str, **options: Any) -> MemoryStore:
        return cls(**options)

    # The calls every guarded request makes, run in place: LocalStore's twins await an
    # offload coroutine that, with nothing blocking here, only calls the sync operation; one
    # coroutine per call fewer (the rest keep LocalStore's).
    async def aclaim(self, req: ClaimRequest) -> Claim:
        return self.claim(req)

    async def acomplete(
        self, ticket: Ticket, result: bytes, codec: str, ttl: float | None
    ) -> Record:
        return self.complete(ticket, result, codec, ttl)

    # LocalStore's claim and complete, each in one frame: theirs hand ``_transact`` a closure
    # made per call (a step, and for complete a change inside a fenced step). The same rules.
    def claim(self, req: ClaimRequest) -> Claim:
        at = (req.scope, req.key)
        with self._lock:
            claim, write = rules.decide(self._data.get(at), req, self._clock())
            if write:
                self._data[at] = claim.record
            return claim

    def complete(self, ticket: Ticket, result: bytes, codec: str, ttl: float | None) -> Record:
        at = (ticket.scope, ticket.key)
        with self._lock:
            current, now = self._data.get(at), self._clock()
            if current is None or not rules.holds(current, ticket, now):
                raise lease_lost(ticket, current)
            new = self._data[at] = rules.completed(
                current, now, result=result, codec=codec, ttl=ttl
            )
            return new

    async def arelease(self, ticket: Ticket) -> None:
        self.release(ticket)

    def _now(self) -> float:
        return self._clock()

    def resolve(self, scope: str, key: str, how: Resolution) -> Record:
        done = super().resolve(scope, key, how)
        if how.audit is not None:  # the action is done: its row follows in the same process
            self.add_audit(audited(how, done))
        return done

    def add_audit(self, entry: AuditEntry) -> None:
        with self._lock:
            at = self._clock()
            row = AuditRow(
                str(len(self._audit) + 1),
                at,
                entry.operator,
                entry.action,
                entry.target,
                entry.before,
                entry.after,
            )
            self._audit.append(row)

    async def aadd_audit(self, entry: AuditEntry) -> None:
        self.add_audit(entry)

    def audit_rows(self, query: AuditQuery) -> list[AuditRow]:
        with self._lock:
            end = len(self._audit)
            if query.before is not None:
                end = min(end, int(query.before) - 1) if query.before.isdigit() else 0
            found = []
            for row in reversed(self._audit[: max(end, 0)]):
                if query.takes(row):
                    found.append(row)
                    if len(found) == query.limit:
                        break
            return found

    async def aaudit_rows(self, query: AuditQuery) -> list[AuditRow]:
        return self.audit_rows(query)

    def _transact(self, scope: str, key: str, step: Step[T]) -> T:
        with self._lock:
            current = self._data.get((scope, key))
            answer, new = step(current, self._clock())
            if new is None:
                self._data.pop((scope, key), None)
            elif new is not KEEP:
                self._data[(scope, key)] = new
            return answer

    def _records(self) -> list[Record]:
        with self._lock:
            return list(self._data.values())

    def _delete_expired(self, now: float, limit: int | None) -> int:
        with self._lock:
            doomed = [k for k, r in self._data.items() if r.expired(now)][:limit]
            for k in doomed:
                del self._data[k]
            return len(doomed)
