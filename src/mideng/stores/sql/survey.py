"""The survey capability on the SQL store's own connections: the record table's survey and
``purge_older`` (``stores.record_table.survey``) on the sync or the async executor."""

from __future__ import annotations

from mideng.core.record import Record
from mideng.stores.record_table.ops import Sweep
from mideng.stores.record_table.survey import (
    list_records,
    outcomes,
    purge_older,
    survey,
    with_request_id,
)
from mideng.stores.sql.execute import AsyncExecutor, Executor
from mideng.stores.survey import (
    ListingStore,
    Outcomes,
    RecordQuery,
    Survey,
    SurveyStore,
    SurveyTerms,
)


class SQLSurvey(SurveyStore, ListingStore):
    """``SQLStore``'s survey and listing: the operations, each one ``drive``, sync and async."""

    executor: Executor
    aexecutor: AsyncExecutor
    #: Where the next ``purge_older`` resumes its walk of the primary key.
    older_sweep: Sweep[tuple[str, str]]

    def count_records(self, terms: SurveyTerms) -> Survey:
        return terms.reported(self.executor.drive(survey, terms))

    async def acount_records(self, terms: SurveyTerms) -> Survey:
        return terms.reported(await self.aexecutor.drive(survey, terms))

    def purge_older(self, age: float, limit: int | None = None) -> int:
        return self.executor.drive(purge_older, age, limit, self.older_sweep)

    async def apurge_older(self, age: float, limit: int | None = None) -> int:
        return await self.aexecutor.drive(purge_older, age, limit, self.older_sweep)

    def list_records(self, query: RecordQuery) -> list[Record]:
        return self.executor.drive(list_records, query)

    async def alist_records(self, query: RecordQuery) -> list[Record]:
        return await self.aexecutor.drive(list_records, query)

    def with_request_id(self, request_id: str, limit: int = 20) -> list[Record]:
        return self.executor.drive(with_request_id, request_id, limit)

    async def awith_request_id(self, request_id: str, limit: int = 20) -> list[Record]:
        return await self.aexecutor.drive(with_request_id, request_id, limit)

    def outcomes(self, since: float, width: float) -> Outcomes:
        return self.executor.drive(outcomes, since, width)

    async def aoutcomes(self, since: float, width: float) -> Outcomes:
        return await self.aexecutor.drive(outcomes, since, width)
