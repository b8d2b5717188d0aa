"""The record table in SQL, whatever database holds it: what the SQL store (PostgreSQL,
MySQL/MariaDB), the SQLite store and the transactional mode share.

- ``schema``: the table's columns and name, its DDL and the start-up rule (the migrations
  themselves are ``mideng.schema``'s);
- ``rows``: every row <-> Record conversion, per database and per read;
- ``statements``: the SQL text of every operation, per statement kind (postgresql, mariadb,
  mysql, sqlite);
- ``ops``: every record operation, once, as a generator of statements (run by mideng.db on any
  connection);
- ``claims``: what a store remembers about its claims between calls (their rows, the claim
  order);
- ``steps``: the steps table beside it, its statements and operations;
- ``survey``: the operator's counts and ``purge_older``, as operations;
- ``transactional``: ``RecordTable``, the capability through which the transactional mode
  writes a store's records on the caller's connection, and a step recorded there.

Each store runs these on its own connections: ``stores.sql`` on pooled DB-API cursors, sync
and async; ``stores.sqlite`` on a sqlite3 connection per thread.
"""

from mideng.stores.record_table.transactional import RecordTable

__all__ = ["RecordTable"]
