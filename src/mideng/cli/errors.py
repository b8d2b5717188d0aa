"""How a command's failure reaches the operator: one line on stderr, and an exit code.

Exit codes: 0 all is well; 1 the command found a problem (stuck or UNKNOWN records, a
missing record) or the store failed; 2 a usage error (a bad option, store URL, scope or key).
Every command runs inside ``mideng``'s group, which turns mideng's own errors into these
(``reported``), so no command maps them itself.
"""

from __future__ import annotations

import click

from mideng.errors import (
    ConfigurationError,
    IdempotencyError,
    InvalidKeyError,
    SchemaVersionError,
)

OK, PROBLEMS, USAGE = 0, 1, 2


class Problems(click.ClickException):
    """Exit 1: the command found what it looks for (stuck records, a missing record...), or
    the store failed."""

    exit_code = PROBLEMS


def one_line(exc: BaseException) -> str:
    """An error's message as one line. A driver's runs over several (libpq adds a hint,
    SQLAlchemy the statement and a link); the first says what failed."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def named(exc: BaseException) -> str:
    """``one_line`` after the error's type (a driver's error, whose message alone may not say
    what kind of failure it is). No URL is added: it may hold a password."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {one_line(exc)}" if text else type(exc).__name__


def reported(exc: IdempotencyError) -> click.ClickException:
    """mideng's error as the command's answer: what the operator gave (an option, a store URL,
    a scope or key) refused is a usage error; anything else (the store failed, a record is in
    the way) exit 1."""
    if isinstance(exc, SchemaVersionError):  # what the database holds, not how it was asked
        return Problems(one_line(exc))
    if isinstance(exc, (ConfigurationError, InvalidKeyError)):
        return click.UsageError(one_line(exc))
    return Problems(one_line(exc))


__all__ = ["OK", "PROBLEMS", "USAGE", "Problems", "one_line", "reported"]
