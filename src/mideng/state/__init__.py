"""Backstops in the business tables: each one conditional statement on the caller's connection.

- ``insert_once``: insert by a business unique key; a duplicate answers ``Existing(row)``
  instead of an error, and never aborts the caller's transaction;
- ``StateMachine``: declared transitions; ``advance`` is one ``UPDATE … WHERE status IN
  (…)`` answering ``Applied`` / ``AlreadyThere`` / ``Illegal`` / ``Missing``, an
  ``Illegal`` saying which ``Direction`` the target lies in (behind the row, ahead of it or
  on another branch);
- ``decrement``: ``SET c = c - n WHERE c >= n``, never below zero;
- ``update_versioned``: optimistic locking on a version column;
- ``update_fenced``: a write refused when a newer claim's fence wrote the row (a taken-over
  holder's late write).

Each has an async twin (``ainsert_once``, ``aadvance``, ``adecrement``,
``aupdate_versioned``, ``aupdate_fenced``) for AsyncConnection / AsyncSession; both run the
same statement generators through mideng.db. Tables are SQLAlchemy Core ``Table`` objects, or
Django models with a Django connection (mideng.state.models; the sync functions only);
PostgreSQL, MySQL/MariaDB and SQLite. See docs/state.md and docs/django.md.
"""

from mideng.state.machine import StateMachine
from mideng.state.ops import RowKeptChangingError
from mideng.state.primitives import (
    adecrement,
    ainsert_once,
    aupdate_fenced,
    aupdate_versioned,
    decrement,
    insert_once,
    update_fenced,
    update_versioned,
)
from mideng.state.results import (
    AlreadyThere,
    Applied,
    Conflict,
    Direction,
    Existing,
    Illegal,
    Inserted,
    Insufficient,
    Missing,
    Superseded,
)

__all__ = [
    "AlreadyThere",
    "Applied",
    "Conflict",
    "Direction",
    "Existing",
    "Illegal",
    "Inserted",
    "Insufficient",
    "Missing",
    "RowKeptChangingError",
    "StateMachine",
    "Superseded",
    "adecrement",
    "ainsert_once",
    "aupdate_fenced",
    "aupdate_versioned",
    "decrement",
    "insert_once",
    "update_fenced",
    "update_versioned",
]
