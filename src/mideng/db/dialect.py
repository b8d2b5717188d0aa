"""Which SQL a connection speaks, and which of its failures mean "run it again".

A statement ``kind`` is what SQL text differs by: ``postgresql``, ``mariadb`` (10.5+, with
``INSERT … RETURNING``), ``mysql`` (MySQL 8, or MariaDB told not to use RETURNING) and
``sqlite``. Statement sets are built per kind; a dialect without one is refused here, by name,
rather than being sent another database's SQL.
"""

from __future__ import annotations

from typing import Any

from mideng.errors import ConfigurationError

KINDS = ("postgresql", "mariadb", "mysql", "sqlite")
_MYSQL_FAMILY = ("mysql", "mariadb")


def kind_of(dialect: Any, returning: bool | None = None) -> str:
    """The statement kind of a connected SQLAlchemy dialect. ``returning=False`` makes MariaDB
    use MySQL 8's statements."""
    version = tuple(dialect.server_version_info or (0,))
    mariadb = bool(getattr(dialect, "is_mariadb", False))
    return kind_named(str(dialect.name), version, mariadb, returning)


def kind_named(
    name: str, version: tuple[int, ...], mariadb: bool, returning: bool | None = None
) -> str:
    """The statement kind of a database by name (SQLAlchemy's dialect name, or Django's
    ``connection.vendor``: both say ``postgresql``, ``mysql`` for MariaDB too, ``sqlite``),
    its server version and whether it is MariaDB."""
    if name in ("postgresql", "sqlite"):
        return name
    if name not in _MYSQL_FAMILY:
        raise ConfigurationError(
            f"mideng does not know the {name} dialect; it speaks PostgreSQL, MySQL/MariaDB and "
            "SQLite"
        )
    if mariadb and version >= (10, 5) and returning is not False:
        return "mariadb"
    return "mysql"


def is_mysql(kind: str) -> bool:
    return kind in _MYSQL_FAMILY


def retryable(exc: BaseException) -> bool:
    """A deadlock or serialization failure (the driver's own exception, not SQLAlchemy's
    wrapper): the statement changed nothing, so running the transaction again is safe."""
    if getattr(exc, "sqlstate", None) in ("40P01", "40001"):
        return True
    args: tuple[Any, ...] = getattr(exc, "args", ())
    return bool(args) and args[0] == 1213


def lock_timed_out(exc: BaseException) -> bool:
    """A statement that gave up waiting for another transaction's lock (the driver's own
    exception, not SQLAlchemy's wrapper): PostgreSQL's ``lock_timeout`` (55P03), InnoDB's
    ``innodb_lock_wait_timeout`` (1205), SQLite's busy timeout. The holder is still at work
    and nothing of this statement took effect, so the caller can come back later."""
    if getattr(exc, "sqlstate", None) == "55P03":
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF == 5  # SQLITE_BUSY and its extended codes
    args: tuple[Any, ...] = getattr(exc, "args", ())
    return bool(args) and args[0] == 1205
