"""The outbox's own database connections: the relay's ``AsyncEngine`` from a URL or an
engine, and the sync ``Engine`` an operator's reads run on (``sync_engine``).

The relay is asynchronous (every broker client it publishes with is), so it always runs on an
``AsyncEngine``; a sync ``Engine`` or a URL is turned into one with the async driver of the
same database. URLs come in SQLAlchemy's form or the plain forms the stores take.
"""

from __future__ import annotations

from typing import Any

from mideng.errors import ConfigurationError

# scheme as written -> (async SQLAlchemy driver, module it needs, extra that installs it)
ASYNC_DRIVERS = {
    "postgresql": ("postgresql+psycopg", "psycopg", "postgresql"),
    "postgres": ("postgresql+psycopg", "psycopg", "postgresql"),
    "postgresql+psycopg": ("postgresql+psycopg", "psycopg", "postgresql"),
    "mysql": ("mysql+asyncmy", "asyncmy", "mysql"),
    "mysql+pymysql": ("mysql+asyncmy", "asyncmy", "mysql"),
    "mysql+asyncmy": ("mysql+asyncmy", "asyncmy", "mysql"),
    "mariadb": ("mysql+asyncmy", "asyncmy", "mysql"),
    "mariadb+pymysql": ("mysql+asyncmy", "asyncmy", "mysql"),
    "sqlite": ("sqlite+aiosqlite", "aiosqlite", "sqlite"),
    "sqlite+pysqlite": ("sqlite+aiosqlite", "aiosqlite", "sqlite"),
    "sqlite+aiosqlite": ("sqlite+aiosqlite", "aiosqlite", "sqlite"),
}


def async_url(url: Any) -> Any:
    """``url`` (a string or SQLAlchemy URL) with its database's async driver."""
    import importlib

    from sqlalchemy.engine import make_url

    parsed = make_url(url)  # a URL object as it is: its str() hides the password
    target = ASYNC_DRIVERS.get(parsed.drivername)
    if target is None:
        raise ConfigurationError(
            f"the outbox relay speaks {', '.join(sorted(ASYNC_DRIVERS))}; got {parsed.drivername!r}"
        )
    driver, module, extra = target
    try:
        importlib.import_module(module)
    except ImportError as exc:
        hint = "pip install aiosqlite" if extra == "sqlite" else f"pip install 'mideng[{extra}]'"
        raise ConfigurationError(f"{module} is not installed; {hint}") from exc
    return parsed.set(drivername=driver)


def async_engine(db: Any) -> tuple[Any, bool]:
    """An ``AsyncEngine`` for ``db`` and whether it was made here (then the relay disposes of
    it)."""
    from sqlalchemy.engine import Engine
    from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

    if isinstance(db, AsyncEngine):
        return db, False
    url: Any
    if isinstance(db, Engine):
        url = db.url
    elif isinstance(db, str):
        url = db
    else:
        raise ConfigurationError(
            f"the relay takes a database URL, an Engine or an AsyncEngine; got {type(db)!r}"
        )
    return create_async_engine(async_url(url), pool_size=4), True


def listen_conninfo(engine: Any) -> str | None:
    """A libpq connection string for LISTEN, when the database is PostgreSQL."""
    url = engine.url
    if url.get_backend_name() != "postgresql":
        return None
    plain = url.set(drivername="postgresql")
    return str(plain.render_as_string(hide_password=False))


#: A URL's scheme as written -> the sync SQLAlchemy driver mideng installs for it.
SYNC_DRIVERS = {
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mariadb": "mysql+pymysql",
}


def sync_engine(db: Any) -> Any:
    """A sync ``Engine`` for ``db``: itself, or one made from a URL (plain forms too)."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import Engine, make_url

    if isinstance(db, Engine):
        return db
    if not isinstance(db, str):
        raise ConfigurationError(f"the outbox's reads take a URL or an Engine; got {type(db)!r}")
    url = make_url(db)
    return create_engine(url.set(drivername=SYNC_DRIVERS.get(url.drivername, url.drivername)))
