"""Options of the commands that work on a database (migrate, relay), declared alike: click
alone, without what the store commands import (cli.common: rich, the Guard)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def db_option(what: str, **more: Any) -> Callable[[F], F]:
    """``--db``: the URL of the database the command works on, required, handed to the
    command as ``db_url``."""
    return click.option("--db", "db_url", required=True, help=what, **more)


def seconds(name: str, default: float, what: str, *, zero: bool = True) -> Callable[[F], F]:
    """An option of a number of seconds, ``default`` unless given: never negative, and
    ``zero`` says whether 0 is allowed."""
    return click.option(
        name,
        type=click.FloatRange(min=0, min_open=not zero),
        default=default,
        show_default=True,
        help=what,
    )
