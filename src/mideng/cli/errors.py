"""How a command's failure reaches the operator: one line on stderr, and an exit code.

Exit codes: 0 all is well; 1 the command found a problem (stuck or UNKNOWN records, a
missing record) or the store failed; 2 a usage error (a bad option, store URL, scope or key).
Every command runs inside ``mideng``'s group, which turns mideng's own errors into these
(``reported``), so no command maps them itself.
"""

from __future__ import annotations

import click

from mideng.errors import IdempotencyError, is_usage, named, one_line

OK, PROBLEMS, USAGE = 0, 1, 2


class Problems(click.ClickException):
    """Exit 1: the command found what it looks for (stuck records, a missing record...), or
    the store failed."""

    exit_code = PROBLEMS


def reported(exc: IdempotencyError) -> click.ClickException:
    """mideng's error as the command's answer: what the operator gave (an option, a store URL,
    a scope or key) refused is a usage error; anything else (the store failed, a record is in
    the way) exit 1."""
    if is_usage(exc):
        return click.UsageError(one_line(exc))
    return Problems(one_line(exc))


__all__ = ["OK", "PROBLEMS", "USAGE", "Problems", "named", "one_line", "reported"]
