"""The SQLite store: the embedded default, one file shared by threads and processes.

- ``store``: ``SQLiteStore``, the protocol on a sqlite3 connection per thread, its claim and
  completion sent without entering their operations' generators, its async calls made in place
  on the event loop's thread where they need not wait; ``sqlite_url``, its URL's file and
  options;
- ``statements``: SQLite's statement set (the record table's ``sqlite`` kind, plus the store's
  own positional texts) and ``execute_sqlite``, one statement on a sqlite3 connection;
- ``ops``: the store's own operations: the read-decide-write under ``BEGIN IMMEDIATE``, every
  row, the purge that walks the primary key;
- ``steps``, ``survey``: the steps and survey capabilities on the store's connections.

What it shares with the server SQL store (the record table's statements per kind, its
operations, rows, claims, steps and survey queries) is ``mideng.stores.record_table``; its
batches are ``stores.batch.LocalBatch``, the embedded stores' single operations in a loop.
"""

from mideng.moved import old_module
from mideng.stores.sqlite import store
from mideng.stores.sqlite.store import SQLiteStore, sqlite_url

__all__ = ["SQLiteStore", "sqlite_url"]

# What this path held as one module besides the store, answered for one release.
_HOMES = dict.fromkeys(("PURGE_BATCH", "REPLAY_SCOPES"), store)


__getattr__ = old_module(__name__, _HOMES)
