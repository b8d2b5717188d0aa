"""The import paths the stores' modules had before the SQLite and hybrid stores were packages
and the record table was shared still answer for one release, each with a DeprecationWarning
naming the new one (``MOVED``, checked with every other package's in tests/test_moved.py); the
stores themselves answer at their old paths as before."""

from __future__ import annotations

import warnings

import pytest

from mideng.stores import batch
from mideng.stores.hybrid import batch as hybrid_batch
from mideng.stores.hybrid import store as hybrid_store
from mideng.stores.record_table import claims, ops, rows, schema, statements, transactional
from mideng.stores.record_table import survey as table_survey
from mideng.stores.redis import survey as redis_survey
from mideng.stores.sql import execute
from mideng.stores.sql import survey as sql_survey
from mideng.stores.sqlite import ops as sqlite_ops
from mideng.stores.sqlite import statements as sqlite_statements
from mideng.stores.sqlite import store as sqlite_store
from mideng.stores.sqlite import survey as sqlite_survey

MOVED = [
    ("mideng.stores.sql.ops", "claim", ops.claim),
    ("mideng.stores.sql.statements", "Statements", statements.Statements),
    ("mideng.stores.sql.rows", "record", rows.record),
    ("mideng.stores.sql.schema", "ddl", schema.ddl),
    ("mideng.stores.sql.schema", "DEFAULT_TABLE", schema.DEFAULT_TABLE),
    ("mideng.stores.sql.claims", "ClaimOrder", claims.ClaimOrder),
    ("mideng.stores.sql.table", "RecordTable", transactional.RecordTable),
    ("mideng.stores.sql.embedded", "SQLiteStatements", sqlite_statements.SQLiteStatements),
    ("mideng.stores.sql.embedded", "execute_sqlite", sqlite_statements.execute_sqlite),
    ("mideng.stores.sql.embedded", "transact", sqlite_ops.transact),
    ("mideng.stores.sql.known", "complete_known", execute.complete_known),
    ("mideng.stores.sql.known", "acomplete_known", execute.acomplete_known),
    ("mideng.stores.sql.stats", "survey", table_survey.survey),
    ("mideng.stores.sql.stats", "SQLSurvey", sql_survey.SQLSurvey),
    ("mideng.stores.sql.stats", "SQLiteSurvey", sqlite_survey.SQLiteSurvey),
    ("mideng.stores.redis.scan", "RedisSurvey", redis_survey.RedisSurvey),
    ("mideng.stores.local_batch", "LocalBatch", batch.LocalBatch),
    ("mideng.stores.hybrid_batch", "HybridBatch", hybrid_batch.HybridBatch),
    ("mideng.stores.sqlite_inline", "waited", sqlite_store.waited),
    ("mideng.stores.sqlite", "REPLAY_SCOPES", sqlite_store.REPLAY_SCOPES),
    ("mideng.stores.hybrid", "from_copy", hybrid_store.from_copy),
]


def test_from_import_warns_at_the_importing_line() -> None:
    with pytest.warns(DeprecationWarning, match="import Statements from mideng.stores.record"):
        from mideng.stores.sql.statements import Statements
    assert Statements is statements.Statements


def test_star_import_of_the_old_schema_module_answers_its_names() -> None:
    found: dict[str, object] = {}
    with pytest.warns(DeprecationWarning, match="mideng.stores.sql.schema"):
        exec("from mideng.stores.sql.schema import *", found)
    assert found["ddl"] is schema.ddl


def test_the_stores_answer_at_their_paths_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from mideng.stores.hybrid import HybridStore
        from mideng.stores.sqlite import SQLiteStore, sqlite_url

    assert SQLiteStore is sqlite_store.SQLiteStore
    assert sqlite_url is sqlite_store.sqlite_url
    assert HybridStore is hybrid_store.HybridStore
