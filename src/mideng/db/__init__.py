"""mideng.db: the SQL runtime every SQL-backed feature runs on.

A feature that keeps state in SQL (the SQL store, transactional mode, and whatever comes next:
consumer dedup, outbox, state machines, task tables) writes each operation once, as a generator
of statements, and leaves connections to this package:

- ``statements``: ``Sql`` (one text in every bind style), ``Stmt`` (text + parameters), ``Res``
  (rowcount, rows, lastrowid), ``Op`` (the generator type), ``check_table`` (the table-name
  rule);
- ``drive``: ``drive(op, execute, conn)`` and ``adrive`` — the only loop, sync and async;
- ``caller_connection``: ``Site`` / ``AsyncSite`` — running inside a caller's SQLAlchemy
  Connection, Session, AsyncConnection or AsyncSession; ``site_for`` picks ``Site`` or, for
  a Django connection, ``django_connection.DjangoSite``; the savepoint and ownership rules
  they share are ``rules``; ``django_models``: a Django model as a SQLAlchemy ``Table``, its
  values prepared and rows converted by its fields;
- ``dialect``: ``kind_of`` (which statement set a connection needs), ``retryable`` (a deadlock
  or serialization failure), ``lock_timed_out`` (a lock wait that gave up).

It depends on mideng.errors and nothing above it: stores, guard and the features import it,
never the other way round. SQLAlchemy is imported only when a site or clause is used.
"""

from mideng.db.caller_connection import AsyncSite, Site
from mideng.db.dialect import KINDS, kind_of, lock_timed_out, retryable
from mideng.db.drive import AsyncExecute, Execute, adrive, drive
from mideng.db.statements import Op, Res, Sql, Stmt, check_table

__all__ = [
    "KINDS",
    "AsyncExecute",
    "AsyncSite",
    "Execute",
    "Op",
    "Res",
    "Site",
    "Sql",
    "Stmt",
    "adrive",
    "check_table",
    "drive",
    "kind_of",
    "lock_timed_out",
    "retryable",
]
