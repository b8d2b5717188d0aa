"""The ``mideng`` command. Each subcommand lives in its own module, imported when used."""

from __future__ import annotations

import importlib
from typing import Any

import click

from mideng.cli.errors import reported
from mideng.errors import IdempotencyError

# command name -> "module:attribute" of a click.Command
COMMANDS = {
    "demo": "mideng.cli.demo:demo",
    "inspect": "mideng.cli.records:inspect_record",
    "unresolved": "mideng.cli.records:unresolved",
    "resolve": "mideng.cli.records:resolve",
    "release": "mideng.cli.records:release",
    "purge": "mideng.cli.records:purge",
    "schema": "mideng.cli.schema:schema",
    "migrate": "mideng.cli.migrate:migrate_command",
    "operations": "mideng.cli.operations:operations",
    "outbox": "mideng.cli.outbox:outbox",
    "relay": "mideng.cli.relay:relay",
    "jobs": "mideng.cli.jobs:jobs",
    "once": "mideng.cli.jobs:once",
    "stats": "mideng.cli.survey:stats",
    "dashboard": "mideng.cli.dashboard:dashboard",
    "scan": "mideng.cli.survey:scan",
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, _, attr = target.partition(":")
        command: Any = getattr(importlib.import_module(module_name), attr)
        return command  # type: ignore[no-any-return]

    def invoke(self, ctx: click.Context) -> Any:
        # Every command runs in here: mideng's own errors become one line and the exit code
        # that says whose they are (errors.reported), whatever command raised them.
        try:
            return super().invoke(ctx)
        except IdempotencyError as exc:
            raise reported(exc) from exc


@click.group(cls=LazyGroup)
@click.version_option(package_name="mideng")
def main() -> None:
    """mideng: run each business operation once, whatever retries and redeliveries do."""
