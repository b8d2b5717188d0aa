"""What the commands over a store share (records, survey, operations): the store option,
``--json``, counts and durations, output. The database commands' options are
``mideng.cli.options``; exit codes and how errors become one line, ``mideng.cli.errors``."""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import re
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from mideng.cli.errors import Problems, one_line
from mideng.core.keys import check_text
from mideng.errors import InvalidKeyError
from mideng.guard import Guard
from mideng.guard.default import DEFAULT_STORE
from mideng.observability import logs
from mideng.stores.registry import open_store

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

#: The most rows a command asks a store for at once: SQL's BIGINT, the widest LIMIT every
#: store takes (SQLite can't bind a bigger number, PostgreSQL refuses one).
MAX_ROWS = 2**63 - 1

store_option = click.option(
    "--store",
    "store_url",
    envvar="MIDENG_STORE",
    default=DEFAULT_STORE,
    show_default=True,
    help="Store URL (or the MIDENG_STORE environment variable).",
)
json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print JSON (stable field names) instead of a table."
)


def limit_option(what: str) -> Callable[[F], F]:
    """``--limit``: at most this many rows listed, 1 or more on every store (a negative LIMIT
    is "no limit" to SQLite and an error to PostgreSQL)."""
    return click.option(
        "--limit",
        type=click.IntRange(1, MAX_ROWS),
        default=100,
        show_default=True,
        help=what,
    )


def stored_text(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An option's text that a store compares with what it holds (a scope prefix): text any
    store can hold, or a usage error (a driver would fail to send a lone surrogate)."""
    try:
        return None if value is None else check_text(value, str(param.name))
    except InvalidKeyError as exc:
        raise click.BadParameter(str(exc), ctx, param) from exc


def imported(path: str, option: str, kind: type[T], example: str) -> T:
    """The ``kind`` that ``module:attribute`` names, for the ``option`` that gave it.

    The current directory is looked in first, as ``python -m`` and uvicorn look: a service's
    module is usually named from its own folder, and an installed console script would not
    find it there. A name that leads to nothing, or to something else than a ``kind``, is a
    bad option (exit 2); the module failing as it is imported is exit 1."""

    def bad(message: str) -> click.BadParameter:
        return click.BadParameter(message, param_hint=f"'{option}'")

    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise bad(f"takes module:attribute, e.g. {example}")
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise bad(f"can't import {module_name}: {one_line(exc)}") from exc
    except Exception as exc:  # the service's own module: whatever its code raises
        raise Problems(
            f"importing {module_name} failed: {type(exc).__name__}: {one_line(exc)}"
        ) from exc
    if not hasattr(module, attr):
        raise bad(f"{module_name} has no {attr}")
    found = getattr(module, attr)
    if not isinstance(found, kind):
        raise bad(f"{path} is a {type(found).__name__}, not a {kind.__name__}")
    return found


def opened(store_url: str) -> contextlib.closing[Guard]:
    """A Guard on the store, closed when the block ends."""
    return contextlib.closing(Guard(open_store(store_url)))


#: mideng's log lines on stderr while a command runs (see observability.logs.to_stderr).
logged = logs.to_stderr


def emit(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False))


def console() -> Console:
    return Console()


def progress(as_json: bool, what: str) -> Progress:
    """A progress bar on stderr, shown on a terminal only (never under --json)."""
    err = Console(stderr=True)
    return Progress(
        SpinnerColumn(),
        TextColumn(what),
        BarColumn(),
        TextColumn("{task.completed} records"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        disable=as_json or not err.is_terminal,
    )


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class Duration(click.ParamType):  # type: ignore[type-arg]
    """Seconds, or a number with a unit: ``90s``, ``30m``, ``12h``, ``7d``, ``2w``."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        found = _DURATION.match(str(value))
        if found is None:
            self.fail(f"{value!r} is not a duration (e.g. 90s, 30m, 12h, 7d)", param, ctx)
        seconds = float(found.group(1)) * _UNITS[found.group(2)]
        if not math.isfinite(seconds):  # 400 nines are a float's infinity
            self.fail(f"{value!r} is too long a duration", param, ctx)
        return seconds
