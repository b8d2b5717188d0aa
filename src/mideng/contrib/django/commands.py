"""What the app's ``mideng_*`` management commands share: their errors as one line and an exit
code (1: what the command met, a store or broker failing; 2: how it was asked), the store of
``settings.MIDENG`` unless ``--store`` names another, and JSON printed as ``mideng``'s
commands print it. The work itself is the ``mideng`` command's, below both of them:
``stores.reports``, ``operations.reconcile``, ``outbox.service``."""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import json
from argparse import ArgumentParser
from collections.abc import Iterator
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from mideng.contrib.django.project import build
from mideng.contrib.django.settings import config
from mideng.errors import IdempotencyError, is_usage, named, one_line
from mideng.guard import Guard

#: Exit codes, as the ``mideng`` command's (mideng.cli.errors).
PROBLEMS, USAGE = 1, 2


def usage(message: str) -> CommandError:
    """How the command was asked is wrong: exit 2."""
    return CommandError(message, returncode=USAGE)


def problem(message: str) -> CommandError:
    """What the command found, or a store or broker failing: exit 1."""
    return CommandError(message, returncode=PROBLEMS)


def positive(text: str) -> float:
    """An option's number of seconds: a non-negative finite number."""
    seconds = float(text)
    if not 0 <= seconds < float("inf"):
        raise ValueError(text)
    return seconds


class MidengCommand(BaseCommand, metaclass=abc.ABCMeta):
    """A command whose mideng and driver errors end it with one line and an exit code."""

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--store",
            default=None,
            help="Store URL (default: settings.MIDENG's store, else its database).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            self.run(**options)
        except IdempotencyError as exc:
            raise (usage if is_usage(exc) else problem)(one_line(exc)) from exc
        except ImproperlyConfigured as exc:  # the settings the command reads
            raise usage(one_line(exc)) from exc
        except (CommandError, SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:  # a driver's error: the store or broker failed
            raise problem(named(exc)) from exc

    @abc.abstractmethod
    def run(self, **options: Any) -> None:
        """The command's work, with its parsed options."""

    @contextlib.contextmanager
    def guard(self, store: str | None) -> Iterator[Guard]:
        """A Guard on the setting's store (or ``store``), closed when the block ends."""
        settings = config()
        if store is not None:
            settings = dataclasses.replace(settings, store=store)
        made = build(settings)
        try:
            yield made
        finally:
            made.close()

    def emit(self, value: Any) -> None:
        """JSON as ``mideng``'s commands print it."""
        self.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False))
