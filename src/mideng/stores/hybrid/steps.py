"""The steps capability of the hybrid store: the durable store's, since a step is fenced
where the claim is decided."""

from __future__ import annotations

from mideng.core.record import Record
from mideng.errors import ConfigurationError
from mideng.stores.base import RecordStore
from mideng.stores.steps import Finished, OperationEntry, OperationPosition, StepStore


class DurableSteps(StepStore):
    """Steps kept by the store that decides claims (the hybrid's durable side): a step is
    fenced where the claim is."""

    durable: RecordStore

    def _durable_steps(self) -> StepStore:
        if not isinstance(self.durable, StepStore):
            raise ConfigurationError(
                f"multi-step operations need a durable store with steps; {self.durable!r} has none"
            )
        return self.durable

    def begin_steps(
        self, scope: str, key: str, owner: str, arguments: bytes, codec: str
    ) -> dict[str, Finished]:
        return self._durable_steps().begin_steps(scope, key, owner, arguments, codec)

    def record_step(
        self, scope: str, key: str, owner: str, step: str, result: bytes, codec: str
    ) -> None:
        self._durable_steps().record_step(scope, key, owner, step, result, codec)

    def clear_steps(self, scope: str, key: str) -> None:
        self._durable_steps().clear_steps(scope, key)

    def operations(
        self, scope: str | None = None, limit: int = 100, after: OperationPosition | None = None
    ) -> list[OperationEntry]:
        return self._durable_steps().operations(scope, limit, after)

    def operation(self, scope: str, key: str) -> OperationEntry | None:
        return self._durable_steps().operation(scope, key)

    def running(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return self._durable_steps().running(scope, limit)

    async def abegin_steps(
        self, scope: str, key: str, owner: str, arguments: bytes, codec: str
    ) -> dict[str, Finished]:
        return await self._durable_steps().abegin_steps(scope, key, owner, arguments, codec)

    async def arecord_step(
        self, scope: str, key: str, owner: str, step: str, result: bytes, codec: str
    ) -> None:
        await self._durable_steps().arecord_step(scope, key, owner, step, result, codec)

    async def aclear_steps(self, scope: str, key: str) -> None:
        await self._durable_steps().aclear_steps(scope, key)

    async def aoperations(
        self, scope: str | None = None, limit: int = 100, after: OperationPosition | None = None
    ) -> list[OperationEntry]:
        return await self._durable_steps().aoperations(scope, limit, after)

    async def aoperation(self, scope: str, key: str) -> OperationEntry | None:
        return await self._durable_steps().aoperation(scope, key)

    async def arunning(self, scope: str | None = None, limit: int = 100) -> list[Record]:
        return await self._durable_steps().arunning(scope, limit)
