"""The SQL store (PostgreSQL, MySQL/MariaDB), split by concern.

- ``store``: ``SQLStore``, the protocol, sync and async; each method names an operation;
- ``ops``: every operation, once, as a generator of statements (run by mideng.db);
- ``statements``: the SQL text of those operations per statement kind;
- ``rows``: every row <-> Record conversion of the SQL and SQLite stores;
- ``schema``: all DDL of the record table, SQLite's included;
- ``execute``: running operations on the store's own connections (sync, and per event loop);
- ``connections``: the connection + cursor cache in front of SQLAlchemy's pool;
- ``connect``: URLs, drivers, timeouts, error mapping;
- ``claims``: what the store remembers about its claims (their rows, the claim order);
- ``table``: ``RecordTable``, the capability through which the transactional mode writes a
  SQL-backed store's records on the caller's connection.
"""

from mideng.stores.sql.store import SQLStore

__all__ = ["SQLStore"]
