"""``Outbox``: the table, and ``add`` / ``aadd`` writing a message in the caller's transaction.

``add`` never commits: the row commits or rolls back with the business change it sits beside,
which is the whole point. Payloads are JSON (bytes go in as they are); the headers every
published message carries (message id, business key, request id) are fixed here, when the row
is written, so the row shows exactly what will be sent.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from mideng.core import effects
from mideng.core.effects import Effects, either
from mideng.db.caller_connection import AsyncSite, Site, site_for
from mideng.db.django_connection import (
    DjangoSite,
    django_connection,
    django_kind,
    is_django_connection,
)
from mideng.db.statements import Op
from mideng.errors import ConfigurationError
from mideng.messaging.headers import REQUEST_ID
from mideng.messaging.publish import outgoing
from mideng.outbox.ops import add as add_row
from mideng.outbox.schema import DEFAULT_TABLE, NAME_MAX
from mideng.outbox.statements import Queries
from mideng.schema.apply import Need, database_url, ensure, on_connection
from mideng.schema.apply import command as migrate_command
from mideng.schema.tables import outbox as outbox_tables


def encode_payload(payload: Any) -> bytes:
    """The message body: bytes as they are, anything else as compact JSON."""
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return bytes(payload)
    try:
        return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"an outbox payload must be bytes or JSON-serialisable: {exc}"
        ) from exc


def _name(what: str, value: object, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value or len(value) > NAME_MAX:
        raise ConfigurationError(
            f"outbox {what} must be a non-empty string of at most {NAME_MAX} characters: {value!r}"
        )
    return value


class Outbox:
    """The outbox table behind ``engine`` (a SQLAlchemy ``Engine`` or ``AsyncEngine``, or a
    Django connection or its alias, whose tables come from Django migrations).

    ``auto_upgrade``: whether ``create_schema`` upgrades tables of an older schema version;
    by default only on SQLite (mideng.schema), and otherwise they are refused, naming the
    ``mideng migrate`` command that upgrades them.
    """

    def __init__(
        self, engine: Any, *, table: str = DEFAULT_TABLE, auto_upgrade: bool | None = None
    ) -> None:
        from mideng.db.dialect import kind_of

        self.engine = engine
        self.table = table
        # MariaDB and MySQL tell apart only once connected; their outbox statements are the
        # same, so the engine's dialect names the DDL and each connection its statements.
        if is_django_connection(engine):
            self.kind = django_kind(django_connection(engine), connected=False)
        else:
            self.kind = kind_of(engine.dialect)
        self.queries = Queries(self.kind, table)
        self._by_kind = {self.kind: self.queries}
        self.tables = outbox_tables(table)
        self.auto_upgrade = self.kind == "sqlite" if auto_upgrade is None else auto_upgrade

    def create_schema(self) -> None:
        """Create the tables (and on PostgreSQL the NOTIFY trigger) if they are missing, and
        use, upgrade or refuse existing ones by their schema version (mideng.schema)."""
        if is_django_connection(self.engine):
            raise ConfigurationError(
                "a Django project creates the outbox tables with its migrations "
                "(mideng.schema.django.operation), not with create_schema()"
            )
        with self.engine.connect() as connection:
            self._ensure(connection)

    async def acreate_schema(self) -> None:
        async with self.engine.connect() as connection:
            await connection.run_sync(self._ensure)

    def _ensure(self, connection: Any) -> None:
        command = migrate_command(database_url(connection.engine.url), self.tables)

        def ensured(family: str) -> Op[Need]:
            return ensure(family, self.tables, auto_upgrade=self.auto_upgrade, command=command)

        if on_connection(connection, ensured) is not Need.NOTHING:
            connection.invalidate()  # migrating changed its session's timeouts

    def _values(
        self,
        destination: str,
        payload: Any,
        key: str | None,
        headers: Mapping[str, str] | None,
        event_type: str,
    ) -> dict[str, Any]:
        _name("destination", destination)
        _name("key", key, optional=True)
        if not isinstance(event_type, str) or len(event_type) > NAME_MAX:
            raise ConfigurationError(f"outbox event_type must be a short string: {event_type!r}")
        body = encode_payload(payload)
        # Every row is its own event, with its own id: the key is its aggregate, shared by
        # every event of one order, so it must not name the message as publish() lets it.
        message = outgoing(
            destination, body, key=key, headers=headers, message_id=str(uuid.uuid4())
        )
        request_id = message.headers.get(REQUEST_ID)
        return {
            "id": message.message_id,
            "destination": destination,
            "key": key,
            "type": event_type,
            "payload": body,
            "headers": json.dumps(dict(message.headers), separators=(",", ":")),
            "request_id": request_id[:NAME_MAX] if request_id else None,
            "created_at": time.time(),
        }

    def add(
        self,
        conn: Any,
        destination: str,
        payload: Any,
        *,
        key: str | None = None,
        headers: Mapping[str, str] | None = None,
        event_type: str = "",
    ) -> str:
        """Write one message into ``conn``'s transaction (a ``Connection`` or ``Session``, or a
        Django connection or its alias inside ``transaction.atomic()``); the caller commits it
        with the business change. Returns the message id."""
        values = self._values(destination, payload, key, headers, event_type)
        return effects.run(self._written(site_for(conn), values))

    async def aadd(
        self,
        conn: Any,
        destination: str,
        payload: Any,
        *,
        key: str | None = None,
        headers: Mapping[str, str] | None = None,
        event_type: str = "",
    ) -> str:
        """``add`` for an ``AsyncConnection`` or ``AsyncSession``."""
        values = self._values(destination, payload, key, headers, event_type)
        return await effects.arun(self._written(AsyncSite(conn), values))

    def _written(self, site: Site | DjangoSite | AsyncSite, values: dict[str, Any]) -> Effects[str]:
        """The message's row written on ``site``; its id. A transaction the site begins is
        left open for the caller, as SQLAlchemy's own autobegin would: add() must never
        commit (and on a Django connection, which begins none that waits, there must be an
        atomic block of the caller's)."""
        kind = yield either(site.open, savepoint=False, left_open=True)
        yield either(site.run, add_row(self._for(kind), values))
        return str(values["id"])

    def _for(self, kind: str) -> Queries:
        queries = self._by_kind.get(kind)
        if queries is None:
            queries = self._by_kind[kind] = Queries(kind, self.table)
        return queries
