"""The steps capability on the SQLite store's connections: the steps table's operations
(``stores.record_table.steps``), each statement an autocommit transaction of its own (the
write's condition and insert are one statement)."""

from __future__ import annotations

import abc

from mideng.core.event_loop import to_thread
from mideng.core.record import Record
from mideng.db.statements import Op, T
from mideng.stores.record_table.steps import (
    begin_steps,
    clear_steps,
    operation,
    operations,
    record_step,
    running,
)
from mideng.stores.sqlite.statements import SQLiteStatements
from mideng.stores.steps import Finished, OperationEntry, OperationPosition, StepStore


class SQLiteSteps(StepStore):
    """SQLiteStore's steps: each operation one ``_drive`` on its connection of this thread,
    the async twins offloaded."""

    offload_reason = "an embedded store: its sync operations are short local transactions"
    statements: SQLiteStatements

    @abc.abstractmethod
    def _drive(self, op: Op[T]) -> T:
        """``op`` run on the store's connection of this thread (SQLiteStore's)."""

    def begin_steps(
        self, scope: str, key: str, owner: str, arguments: bytes, codec: str
    ) -> dict[str, Finished]:
        return self._drive(begin_steps(self.statements, scope, key, owner, arguments, codec))

    def record_step(
        self, scope: str, key: str, owner: str, step: str, result: bytes, codec: str
    ) -> None:
        self._drive(record_step(self.statements, scope, key, owner, step, result, codec))

    def clear_steps(self, scope: str, key: str) -> None:
        self._drive(clear_steps(self.statements, scope, key))

    def operations(
        self, scope: str | None = None, limit: int = 100, after: OperationPosition | None = None
    ) -> list[OperationEntry]:
        return self._drive(operations(self.statements, scope, limit, after))

    def operation(self, scope: str, key: str) -> OperationEntry | None:
        return self._drive(operation(self.statements, scope, key))

    def running(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return self._drive(running(self.statements, scope, limit))

    async def abegin_steps(
        self, scope: str, key: str, owner: str, arguments: bytes, codec: str
    ) -> dict[str, Finished]:
        return await to_thread(self.begin_steps, scope, key, owner, arguments, codec)

    async def arecord_step(
        self, scope: str, key: str, owner: str, step: str, result: bytes, codec: str
    ) -> None:
        await to_thread(self.record_step, scope, key, owner, step, result, codec)

    async def aclear_steps(self, scope: str, key: str) -> None:
        await to_thread(self.clear_steps, scope, key)

    async def aoperations(
        self, scope: str | None = None, limit: int = 100, after: OperationPosition | None = None
    ) -> list[OperationEntry]:
        return await to_thread(self.operations, scope, limit, after)

    async def aoperation(self, scope: str, key: str) -> OperationEntry | None:
        return await to_thread(self.operation, scope, key)

    async def arunning(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return await to_thread(self.running, scope, limit)
