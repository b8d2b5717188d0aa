"""``mideng jobs run`` / ``mideng jobs list`` over a service's jobs, and ``mideng once``: a
shell command run once per slot across hosts (cron's line, without the double runs)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from datetime import timedelta
from typing import Any

import click

from mideng.cli.common import (
    Duration,
    emit,
    imported,
    json_option,
    logged,
    opened,
    store_option,
)
from mideng.errors import ConfigurationError
from mideng.jobs import Job, JobContext, Jobs, Missed, Outcome, Overlap, Scheduler, run_slot
from mideng.jobs.job import schedule_of
from mideng.jobs.status import JobView, recent
from mideng.stores.reports import when


def load_jobs(target: str) -> list[Job]:
    """``module:attribute``: a Jobs registry, a Job, or a list of Jobs."""
    found = imported(target, "JOBS", object, "shop.jobs:jobs")
    if isinstance(found, Job):
        return [found]
    items = list(found) if isinstance(found, Jobs | list | tuple) else None
    if not items or not all(isinstance(job, Job) for job in items):
        raise click.BadParameter(
            f"{target!r} is a {type(found).__name__}, not a Jobs registry or a list of Jobs",
            param_hint="JOBS",
        )
    return items


@click.group("jobs")
def jobs() -> None:
    """Scheduled jobs: each slot runs once across every scheduler on the store."""


@jobs.command("run")
@store_option
@click.option("--async", "use_async", is_flag=True, help="Run the loops on an event loop.")
@click.argument("target", metavar="JOBS")
def run_jobs(store_url: str, use_async: bool, target: str) -> None:
    """Run the jobs of JOBS (module:attribute) until SIGTERM or Ctrl-C, which let a running
    job end first."""
    found = load_jobs(target)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    with opened(store_url) as guard:
        scheduler = Scheduler(guard, found)
        if use_async:
            asyncio.run(_arun(scheduler))
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: scheduler.stop())
        scheduler.run()


async def _arun(scheduler: Scheduler) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, scheduler.stop)
    await scheduler.arun()


@jobs.command("list")
@store_option
@json_option
@click.option("--recent", "count", type=click.IntRange(1, 1000), default=5, show_default=True)
@click.argument("target", metavar="JOBS")
def list_jobs(store_url: str, as_json: bool, count: int, target: str) -> None:
    """The jobs of JOBS (module:attribute): their policies, latest slots and next slot."""
    found = load_jobs(target)
    with logged(), opened(store_url) as guard:
        views = [recent(guard.store, job, count) for job in found]
    if as_json:
        emit([_as_dict(view) for view in views])
        return
    for view in views:
        job = view.job
        click.echo(
            f"{job.name}  {job.schedule.describe()}  missed={job.missed.value} "
            f"overlap={job.overlap.value}{'  external effects' if job.external_effects else ''}"
            f"  next {when(view.next_slot)}"
        )
        for slot in view.slots:
            age = "" if slot.age is None else f" for {slot.age:.1f}s"
            fence = "" if slot.fence is None else f" fence={slot.fence}"
            click.echo(f"  {slot.key}  {slot.state.value}{age}{fence}")


def _as_dict(view: JobView) -> dict[str, Any]:
    job = view.job
    return {
        "job": job.name,
        "schedule": job.schedule.describe(),
        "missed": job.missed.value,
        "overlap": job.overlap.value,
        "external_effects": job.external_effects,
        "store_now": when(view.now),
        "next_slot": when(view.next_slot),
        "slots": [
            {
                "slot": slot.key,
                "state": slot.state.value,
                "fence": slot.fence,
                "age_seconds": slot.age,
                "result": None if slot.result is None else slot.result.decode(errors="replace"),
            }
            for slot in view.slots
        ],
    }


#: The signals ``mideng once`` passes on to its command: what stops a service or a shell.
FORWARDED = (signal.SIGTERM, signal.SIGINT)


class CommandKilled(Exception):
    """The slot's command died of a signal: the slot's kept failure."""

    def __init__(self, killed_by: signal.Signals) -> None:
        super().__init__(f"the command was killed by {killed_by.name}")
        self.signal = killed_by


class Command:
    """The slot's command, run to its end with the SIGTERM and SIGINT sent to ``mideng
    once`` passed on to it, so stopping ``mideng once`` stops the command the way the
    command chooses (it may trap the signal and finish), and the slot records how it ended.
    A signal that comes before the command has started is passed on once it has."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.argv, self.env = argv, env
        self.child: subprocess.Popen[bytes] | None = None
        self.pending: list[int] = []

    def forward(self, signum: int, _frame: object) -> None:
        if self.child is None:
            self.pending.append(signum)
        else:
            self.child.send_signal(signum)

    def run(self) -> int:
        """The command's exit code; minus the signal's number if a signal killed it."""
        previous = {sig: signal.signal(sig, self.forward) for sig in FORWARDED}
        try:
            with subprocess.Popen(self.argv, env=self.env) as child:
                self.child = child
                for signum in self.pending:
                    child.send_signal(signum)
                return child.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


@click.command("once", context_settings={"ignore_unknown_options": True})
@store_option
@click.option("--every", "every_", type=Duration(), default=None, help="Slot length: 90s, 1h, 1d.")
@click.option("--cron", default=None, help="A five-field cron expression instead of --every.")
@click.option("--tz", default=None, help="The cron expression's time zone (default UTC).")
@click.option("--lease", type=Duration(), default=60.0, show_default=True, help="Lease.")
@click.option(
    "--external-effects",
    is_flag=True,
    help="A host that dies mid-run leaves the slot UNKNOWN instead of letting it run again.",
)
@click.argument("name")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def once(
    store_url: str,
    every_: float | None,
    cron: str | None,
    tz: str | None,
    lease: float,
    external_effects: bool,
    name: str,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND once for the current slot of NAME across every host: the host that claims
    the slot runs it and exits with its exit code (kept with the slot); a host that finds
    the slot done or running elsewhere exits 0 without running it. SIGTERM and SIGINT are
    passed on to COMMAND; if it dies of a signal the slot is kept as failed, with the
    signal, and the exit status is 128 + the signal's number."""
    if (every_ is None) == (cron is None):
        raise click.UsageError("give one of --every and --cron")
    try:
        schedule = schedule_of(None if every_ is None else timedelta(seconds=every_), cron, tz)
    except ConfigurationError as exc:
        raise click.UsageError(str(exc)) from exc
    exit_code: list[int] = []

    def run_command(context: JobContext) -> dict[str, int]:
        env = dict(os.environ, MIDENG_SLOT=context.key, MIDENG_FENCE=str(context.fence))
        code = Command(list(command), env).run()
        exit_code.append(code)
        if code < 0:  # killed: the slot failed, and is not run again
            raise CommandKilled(signal.Signals(-code))
        return {"exit_code": code}

    job = Job(
        name,
        run_command,
        schedule,
        missed=Missed.LATEST,
        overlap=Overlap.BESIDE,
        external_effects=external_effects,
        lease=lease,
    )
    with logged(), opened(store_url) as guard:
        slot = schedule.slot_at(guard.store.now())
        ran = run_slot(guard, job, slot)
    if ran.outcome in (Outcome.RAN, Outcome.LOST) and exit_code and exit_code[0] >= 0:
        sys.exit(exit_code[0])
    if ran.outcome is Outcome.FAILED and isinstance(ran.error, CommandKilled):
        click.echo(f"{name} {ran.key}: failed, {ran.error}", err=True)
        sys.exit(128 + ran.error.signal)  # the shell's exit status of a killed command
    if ran.outcome is Outcome.FAILED:
        raise click.ClickException(f"{name} {ran.key}: {ran.error}")
    if ran.outcome is Outcome.UNKNOWN:
        raise click.ClickException(
            f"{name} {ran.key} is UNKNOWN: a host died running it; resolve it with "
            f"`mideng resolve {job.scope} {ran.key}`"
        )
    click.echo(f"{name} {ran.key}: {ran.outcome.value}", err=True)
