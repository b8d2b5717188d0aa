"""The survey capability on the SQLite store's connections: the record table's survey,
``purge_older`` and listing (``stores.record_table.survey``), counted by SQLite."""

from __future__ import annotations

import abc

from mideng.core.record import Record
from mideng.db.statements import Op, T
from mideng.stores.record_table.ops import Sweep
from mideng.stores.record_table.survey import (
    list_records,
    outcomes,
    purge_older,
    survey,
    with_request_id,
)
from mideng.stores.sqlite.statements import SQLiteStatements
from mideng.stores.survey import LocalSurvey, Outcomes, RecordQuery, Survey, SurveyTerms


class SQLiteSurvey(LocalSurvey):
    """``SQLiteStore``'s survey: the operations on its connection of this thread (the async
    twins offloaded like every other operation of the embedded store)."""

    statements: SQLiteStatements
    #: Where the next ``purge_older`` resumes its walk of the primary key.
    older_sweep: Sweep[tuple[str, str]]

    @abc.abstractmethod
    def _drive(self, op: Op[T]) -> T:
        """``op`` run on the store's connection of this thread (SQLiteStore's)."""

    def count_records(self, terms: SurveyTerms) -> Survey:
        return terms.reported(self._drive(survey(self.statements, terms)))

    def purge_older(self, age: float, limit: int | None = None) -> int:
        return self._drive(purge_older(self.statements, age, limit, self.older_sweep))

    def list_records(self, query: RecordQuery) -> list[Record]:
        return self._drive(list_records(self.statements, query))

    def with_request_id(self, request_id: str, limit: int = 20) -> list[Record]:
        return self._drive(with_request_id(self.statements, request_id, limit))

    def outcomes(self, since: float, width: float) -> Outcomes:
        return self._drive(outcomes(self.statements, since, width))
