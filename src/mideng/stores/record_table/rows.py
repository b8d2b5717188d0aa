"""Rows to records and back: every place the SQL and SQLite stores know the column order.

The record table's columns are the Record's fields in order (``RECORD_FIELDS``). A row is built
into a Record by position here and nowhere else in the stores, because positions are what the
hot paths can afford: keywords cost twice as much on every call. A new field means editing
this module (and the DDL in ``schema``), nothing else.

Row shapes:

- ``record``: the full record, as ``SELECT <columns>`` returns it (any database; MySQL's
  VARBINARY scope, key and owner decoded by ``mysql_record``);
- ``current``: a claim's or a read's row, the record after scope and key and then the database
  clock (scope and key are the caller's own); ``psycopg_current`` the same from psycopg's
  binary results, already typed, as ``typed`` reads the SQLite store's own rows;
- ``mysql_current``: the same packed into two columns (``mysql_packed``), for PyMySQL;
- ``sqlite_replayed``: a finished row as the SQLite store's duplicate reads it first
  (``REPLAYED``), three columns fewer; ``sqlite_replayed_as`` the same in a scope whose codec
  the store has learnt (``replayed_as``), four fewer;
- ``row_of``: a Record as the column values to insert; ``cas_params``: the binds of the
  compare-and-set that turns one row into another.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mideng.core.record import SUCCEEDED, Record, Status

_STATUS = {s.value: s for s in Status}


def record(row: Sequence[Any]) -> Record:
    """A Record from the record's columns in order (extra trailing columns ignored)."""
    (
        scope,
        key,
        status,
        fence,
        owner,
        fingerprint,
        lease_until,
        result,
        codec,
        error,
        attempts,
        request_id,
        created_at,
        updated_at,
        expires_at,
    ) = row[:15]
    return Record(
        scope,
        key,
        _STATUS[status],
        int(fence),
        owner,
        fingerprint,
        lease_until,
        None if result is None else bytes(result),
        codec,
        None if error is None else bytes(error),
        attempts,
        request_id,
        created_at,
        updated_at,
        expires_at,
    )


def maybe_record(row: Sequence[Any] | None) -> Record | None:
    return None if row is None else record(row)


def mysql_record(row: Sequence[Any]) -> Record:
    """``record`` for MySQL/MariaDB, whose scope, key and owner are VARBINARY."""
    scope, key, owner = row[0].decode(), row[1].decode(), row[4].decode()
    return record((scope, key, row[2], row[3], owner, *row[5:15]))


def current(row: Sequence[Any], scope: str, key: str) -> tuple[Record, float]:
    """The record and the database clock from a claim's or a read's row."""
    return record((scope, key, *row[:13])), float(row[13])


def typed(row: Sequence[Any], scope: str, key: str) -> Record:
    """The record from its columns after scope and key, already of the record's types: the
    SQLite store's own claim read (``SQLiteStatements.select_q``, as sqlite3 returns it) and
    psycopg's binary results (extra trailing columns ignored)."""
    return Record(scope, key, _STATUS[row[0]], *row[1:13])


def psycopg_current(row: Sequence[Any], scope: str, key: str) -> tuple[Record, float]:
    """``current`` for the store's own psycopg connection, whose binary results already carry
    each column's record type (bytea as bytes, the clock as a float): a duplicate then builds
    its record without a conversion pass. Transactional mode reads through the caller's
    driver, so it keeps ``current``."""
    return Record(scope, key, _STATUS[row[0]], *row[1:13]), row[13]


#: The select list of ``sqlite_replayed``: a succeeded row without a lease or an error (what
#: every completion writes, and what every duplicate of a finished call reads) has three
#: columns known without reading them, and each column costs sqlite3 about 1,500 instructions
#: (its type, with the GIL released and retaken, and its name for ``cursor.description``),
#: against about 100 for the CASE in SQLite. Its first column is the fence, NULL for any other
#: row: the store then reads that row whole (``typed``), a second statement only off
#: the replay path (in-progress, failed, unknown rows).
REPLAYED = (
    "CASE WHEN status = 'succeeded' AND lease_until IS NULL AND error IS NULL THEN fence END, "
    "owner, fingerprint, result, codec, attempts, request_id, created_at, updated_at, expires_at"
)


def sqlite_replayed(row: Sequence[Any], scope: str, key: str) -> Record:
    """The record from a ``REPLAYED`` row whose fence is not NULL: succeeded, no lease, no
    error, the other fields as read."""
    fence, owner, fingerprint, result, codec, *rest = row  # rest: attempts to expires_at
    lease_until = error = None
    return Record(
        scope, key, SUCCEEDED, fence, owner, fingerprint, lease_until, result, codec, error, *rest
    )


def replayed_as(codec: str) -> str:
    """``REPLAYED`` for a scope whose replays were all ``codec`` so far (an SQL literal): the
    row must have it too to be answered, and the codec column is not read."""
    return (
        "CASE WHEN status = 'succeeded' AND lease_until IS NULL AND error IS NULL "
        f"AND codec = {codec} THEN fence END, "
        "owner, fingerprint, result, attempts, request_id, created_at, updated_at, expires_at"
    )


def sqlite_replayed_as(row: Sequence[Any], scope: str, key: str, codec: str) -> Record:
    """``sqlite_replayed`` from a ``replayed_as(codec)`` row whose fence is not NULL."""
    return sqlite_replayed((*row[:4], codec, *row[4:]), scope, key)


def mysql_packed(now: str) -> str:
    """The select list of ``mysql_current``'s row: two columns, because PyMySQL spends more on
    each column of a result than the server spends finding the row. ``head``: the short fields
    joined by commas (numbers as the server writes them in a result, which parse back to the
    same doubles; a NULL number as nothing; the byte lengths of the variable fields, '-' for
    NULL); ``body``: the variable fields back to back. Scope and key are the caller's own."""

    def size(col: str) -> str:
        return f"IFNULL(LENGTH({col}), '-')"

    head = ", ".join(
        [
            "status",
            "fence",
            "IFNULL(lease_until, '')",
            "attempts",
            "created_at",
            "updated_at",
            "IFNULL(expires_at, '')",
            now,
            "LENGTH(owner)",
            size("fingerprint"),
            size("codec"),
            size("request_id"),
            size("result"),
            size("error"),
        ]
    )
    body = ", ".join(
        [
            "owner",
            *(
                f"IFNULL({c}, '')"
                for c in ("fingerprint", "codec", "request_id", "result", "error")
            ),
        ]
    )
    return f"CONCAT_WS(',', {head}), CONCAT({body})"


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode()


def mysql_current(row: Sequence[Any], scope: str, key: str) -> tuple[Record, float]:
    """``current`` from the two columns of ``mysql_packed``."""
    head, body = row[0], row[1]
    if isinstance(head, bytes):
        head = head.decode()
    (
        status,
        fence,
        lease_until,
        attempts,
        created_at,
        updated_at,
        expires_at,
        now,
        l_owner,
        l_fp,
        l_codec,
        l_rid,
        l_result,
        l_error,
    ) = head.split(",")
    end = int(l_owner)
    owner = body[:end].decode()
    fields: list[bytes | None] = []
    for length in (l_fp, l_codec, l_rid, l_result, l_error):
        if length == "-":
            fields.append(None)
        else:
            start, end = end, end + int(length)
            fields.append(bytes(body[start:end]))
    fp, codec, rid, result, error = fields
    columns = (
        scope,
        key,
        status,
        fence,
        owner,
        _text(fp),
        float(lease_until) if lease_until else None,
        result,
        _text(codec),
        error,
        int(attempts),
        _text(rid),
        float(created_at),
        float(updated_at),
        float(expires_at) if expires_at else None,
    )
    return record(columns), float(now)


def row_of(r: Record) -> tuple[Any, ...]:
    """A Record as its column values, in column order."""
    return (
        r.scope,
        r.key,
        r.status.value,
        r.fence,
        r.owner,
        r.fingerprint,
        r.lease_until,
        r.result,
        r.codec,
        r.error,
        r.attempts,
        r.request_id,
        r.created_at,
        r.updated_at,
        r.expires_at,
    )


def cas_params(old: Record, new: Record, request_id: str | None) -> dict[str, Any]:
    """The binds of ``Statements.cas``: the row becomes ``new`` only if it is still ``old``
    (``request_id``: the new one, as it fits the column)."""
    return {
        "scope": old.scope,
        "key": old.key,
        "status": new.status.value,
        "fence": new.fence,
        "owner": new.owner,
        "fingerprint": new.fingerprint,
        "lease_until": new.lease_until,
        "result": new.result,
        "codec": new.codec,
        "error": new.error,
        "attempts": new.attempts,
        "request_id": request_id,
        "created_at": new.created_at,
        "updated_at": new.updated_at,
        "expires_at": new.expires_at,
        "was_fence": old.fence,
        "was_owner": old.owner,
        "was_status": old.status.value,
        "was_updated_at": old.updated_at,
    }
