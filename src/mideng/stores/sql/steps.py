"""The steps capability on the SQL store's own connections: each operation of the steps table
(``stores.record_table.steps``) one ``drive`` on the sync or the async executor."""

from __future__ import annotations

from mideng.core.record import Record
from mideng.stores.record_table.steps import (
    begin_steps,
    clear_steps,
    operation,
    operations,
    record_step,
    running,
)
from mideng.stores.sql.execute import AsyncExecutor, Executor
from mideng.stores.steps import Finished, OperationEntry, OperationPosition, StepStore


class SQLSteps(StepStore):
    """The capability on SQLStore's own connections: each operation one ``drive``."""

    executor: Executor
    aexecutor: AsyncExecutor

    def begin_steps(
        self, scope: str, key: str, owner: str, arguments: bytes, codec: str
    ) -> dict[str, Finished]:
        return self.executor.drive(begin_steps, scope, key, owner, arguments, codec)

    def record_step(
        self, scope: str, key: str, owner: str, step: str, result: bytes, codec: str
    ) -> None:
        self.executor.drive(record_step, scope, key, owner, step, result, codec)

    def clear_steps(self, scope: str, key: str) -> None:
        self.executor.drive(clear_steps, scope, key)

    def operations(
        self, scope: str | None = None, limit: int = 100, after: OperationPosition | None = None
    ) -> list[OperationEntry]:
        return self.executor.drive(operations, scope, limit, after)

    def operation(self, scope: str, key: str) -> OperationEntry | None:
        return self.executor.drive(operation, scope, key)

    def running(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return self.executor.drive(running, scope, limit)

    async def abegin_steps(
        self, scope: str, key: str, owner: str, arguments: bytes, codec: str
    ) -> dict[str, Finished]:
        return await self.aexecutor.drive(begin_steps, scope, key, owner, arguments, codec)

    async def arecord_step(
        self, scope: str, key: str, owner: str, step: str, result: bytes, codec: str
    ) -> None:
        await self.aexecutor.drive(record_step, scope, key, owner, step, result, codec)

    async def aclear_steps(self, scope: str, key: str) -> None:
        await self.aexecutor.drive(clear_steps, scope, key)

    async def aoperations(
        self, scope: str | None = None, limit: int = 100, after: OperationPosition | None = None
    ) -> list[OperationEntry]:
        return await self.aexecutor.drive(operations, scope, limit, after)

    async def aoperation(self, scope: str, key: str) -> OperationEntry | None:
        return await self.aexecutor.drive(operation, scope, key)

    async def arunning(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return await self.aexecutor.drive(running, scope, limit)
