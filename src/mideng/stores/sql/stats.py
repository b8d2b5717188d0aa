"""Deprecated: the survey is ``mideng.stores.record_table.survey`` (its operations) and the
``survey`` module of each store package (``SQLSurvey``, ``SQLiteSurvey``); this module goes in
the next release. Its names still answer, with a DeprecationWarning."""

from __future__ import annotations

import mideng.stores.record_table.survey
import mideng.stores.sql.survey
import mideng.stores.sqlite.survey
from mideng.moved import names_of, old_module

_HOMES = names_of(
    mideng.stores.record_table.survey, mideng.stores.sql.survey, mideng.stores.sqlite.survey
)


__getattr__ = old_module(__name__, _HOMES)
