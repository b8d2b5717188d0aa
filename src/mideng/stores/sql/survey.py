"""The survey capability on the SQL store's own connections: the record table's survey and
``purge_older`` (``stores.record_table.survey``) on the sync or the async executor."""

from __future__ import annotations

from mideng.stores.record_table.survey import purge_older, survey
from mideng.stores.sql.execute import AsyncExecutor, Executor
from mideng.stores.survey import Survey, SurveyStore, SurveyTerms


class SQLSurvey(SurveyStore):
    """``SQLStore``'s survey: the operations, each one ``drive``, sync and async."""

    executor: Executor
    aexecutor: AsyncExecutor

    def count_records(self, terms: SurveyTerms) -> Survey:
        return terms.reported(self.executor.drive(survey, terms))

    async def acount_records(self, terms: SurveyTerms) -> Survey:
        return terms.reported(await self.aexecutor.drive(survey, terms))

    def purge_older(self, age: float, limit: int | None = None) -> int:
        return self.executor.drive(purge_older, age, limit)

    async def apurge_older(self, age: float, limit: int | None = None) -> int:
        return await self.aexecutor.drive(purge_older, age, limit)
