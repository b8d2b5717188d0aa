"""A sync SQLAlchemy engine for operators' work on mideng's tables (migrations, the outbox's
dead rows): from a database URL in the stores' forms, as ``mideng``'s commands and Django's
``mideng_*`` commands take it."""

from __future__ import annotations

from typing import Any

from mideng.errors import ConfigurationError
from mideng.stores.registry import scheme_of


def engine_for(url: str) -> Any:
    """A sync SQLAlchemy engine for a database URL, in the stores' forms (``postgresql://``,
    ``mysql://``, ``sqlite:///path``) or SQLAlchemy's, without the stores' statement timeouts."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    scheme_of(url)  # the stores' rule for any URL: text, one reachable host and port
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        from mideng.stores.sqlite import sqlite_url

        path, _options = sqlite_url(url)  # the store's rule for its URL: a file, known options
        # A second's busy wait per try: a migration waiting for another says so within it.
        return create_engine(f"sqlite:///{path}", connect_args={"timeout": 1.0})
    if backend not in ("postgresql", "postgres", "mysql", "mariadb"):
        raise ConfigurationError(
            f"mideng's tables live in PostgreSQL, MySQL/MariaDB or SQLite; got {backend!r}"
        )
    from mideng.stores.sql.store import SQLStore

    store = SQLStore.from_url(url, create_schema=False)
    try:
        return store.config.make_migration_engine()
    finally:
        store.close()
