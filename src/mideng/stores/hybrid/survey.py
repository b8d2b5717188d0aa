"""The survey capability of the hybrid store: the durable store's, which holds every record;
``purge_older`` purges the Redis copies too."""

from __future__ import annotations

from mideng.core.record import Record
from mideng.errors import ConfigurationError
from mideng.stores.base import Store
from mideng.stores.survey import (
    ListingStore,
    Outcomes,
    RecordQuery,
    Survey,
    SurveyStore,
    SurveyTerms,
)


class FrontedSurvey(SurveyStore, ListingStore):
    """A Redis copy in front of a durable store (``HybridStore``): the durable store holds
    every record, so it is the one surveyed; ``purge_older`` purges both."""

    durable: Store
    fast: SurveyStore

    def _durable_survey(self) -> SurveyStore:
        durable = self.durable
        if not isinstance(durable, SurveyStore):
            raise ConfigurationError(f"{type(durable).__name__} has no survey")
        return durable

    def _durable_listing(self) -> ListingStore:
        durable = self.durable
        if not isinstance(durable, ListingStore):
            raise ConfigurationError(f"{type(durable).__name__} lists no records")
        return durable

    def count_records(self, terms: SurveyTerms) -> Survey:
        return self._durable_survey().count_records(terms)

    async def acount_records(self, terms: SurveyTerms) -> Survey:
        return await self._durable_survey().acount_records(terms)

    def purge_older(self, age: float, limit: int | None = None) -> int:
        gone = self._durable_survey().purge_older(age, limit)
        self.fast.purge_older(age, limit)  # the copies: a left one would replay until it expires
        return gone

    async def apurge_older(self, age: float, limit: int | None = None) -> int:
        gone = await self._durable_survey().apurge_older(age, limit)
        await self.fast.apurge_older(age, limit)
        return gone

    def list_records(self, query: RecordQuery) -> list[Record]:
        return self._durable_listing().list_records(query)

    async def alist_records(self, query: RecordQuery) -> list[Record]:
        return await self._durable_listing().alist_records(query)

    def with_request_id(self, request_id: str, limit: int = 20) -> list[Record]:
        return self._durable_listing().with_request_id(request_id, limit)

    async def awith_request_id(self, request_id: str, limit: int = 20) -> list[Record]:
        return await self._durable_listing().awith_request_id(request_id, limit)

    def outcomes(self, since: float, width: float) -> Outcomes:
        return self._durable_listing().outcomes(since, width)

    async def aoutcomes(self, since: float, width: float) -> Outcomes:
        return await self._durable_listing().aoutcomes(since, width)
