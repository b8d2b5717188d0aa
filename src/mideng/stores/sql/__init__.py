"""The SQL store (PostgreSQL, MySQL/MariaDB), split by concern.

- ``store``: ``SQLStore``, the protocol, sync and async; each method names an operation;
- ``execute``: running operations on the store's own connections (sync, and per event loop),
  the claim's first statement and a kept claim's completion sent without their generators;
- ``drivers``: one statement on each DB-API driver (psycopg, PyMySQL, asyncmy);
- ``connections``: the connection + cursor cache in front of SQLAlchemy's pool;
- ``connect``: URLs, drivers, timeouts, error mapping;
- ``batch``: batch claims and completions, one multi-row statement each;
- ``steps``, ``survey``: the steps and survey capabilities on the store's executors.

The record table itself (its statements per kind, its operations, rows, claims, steps and
survey queries, ``RecordTable``) is ``mideng.stores.record_table``, shared with the SQLite
store and the transactional mode. ``ops``, ``statements``, ``rows``, ``schema``, ``claims``,
``table``, ``known``, ``embedded`` and ``stats`` are the old paths of what moved, kept for one
release.
"""

from mideng.stores.sql.store import SQLStore

__all__ = ["SQLStore"]
