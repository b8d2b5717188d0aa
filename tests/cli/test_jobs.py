"""``mideng once``, ``mideng jobs list`` and ``mideng jobs run``: a command run once per slot
across hosts with its exit code; the jobs' slots as the store holds them; a scheduler that
SIGTERM stops once its running job has ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from mideng.cli import main
from mideng.core.record import ClaimRequest, ExpiryPolicy, Ticket
from mideng.jobs import Cron, Every, slot_key
from mideng.stores.base import Store
from mideng.stores.sqlite import SQLiteStore

SERVICE = "tests.cli.jobs_service:jobs"


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_once_runs_the_command_on_one_host_per_slot(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'once.db'}"
    name = f"backup{uuid.uuid4().hex[:6]}"
    marker = tmp_path / "ran"
    command = ["sh", "-c", f'echo "$MIDENG_SLOT $MIDENG_FENCE" >> {marker}; exit 7']
    first = cli("once", name, "--store", store, "--every", "1d", "--", *command)
    assert first.exit_code == 7, first.output
    slot = slot_key(Every(86400).slot_at(time.time()))
    assert marker.read_text() == f"{slot} 1\n"
    second = cli("once", name, "--store", store, "--every", "1d", "--", *command)
    assert second.exit_code == 0, second.output
    assert "done" in second.output
    assert marker.read_text() == f"{slot} 1\n"  # not run again


def held_elsewhere(path: Path, name: str, lease: float, expiry: ExpiryPolicy) -> str:
    """Another host's claim on job ``name``'s current hourly slot; the slot's key."""
    slot = slot_key(Every(3600).slot_at(time.time()))
    with SQLiteStore(str(path)) as store:
        req = ClaimRequest(f"job:{name}", slot, "other-host", lease, 600.0, None, expiry)
        assert store.claim(req).acquired
    return slot


def test_once_leaves_a_slot_running_elsewhere(tmp_path: Path) -> None:
    path = tmp_path / "once.db"
    name = f"sync{uuid.uuid4().hex[:6]}"
    held_elsewhere(path, name, 60.0, ExpiryPolicy.TAKE_OVER)
    result = cli("once", name, "--store", f"sqlite:///{path}", "--every", "1h", "--", "false")
    assert result.exit_code == 0, result.output
    assert "running" in result.output


def test_once_refuses_a_missing_or_double_schedule(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'once.db'}"
    assert "one of --every and --cron" in cli("once", "x", "--store", store, "--", "true").output
    both = cli("once", "x", "--store", store, "--every", "1h", "--cron", "0 * * * *", "--", "true")
    assert both.exit_code == 2
    bad = cli("once", "x", "--store", store, "--cron", "0 25 * * *", "--", "true")
    assert bad.exit_code == 2
    assert "hour 25 is outside 0-23" in bad.output


def _claim(store: Store, key: str, lease: float, expiry: ExpiryPolicy) -> Ticket:
    req = ClaimRequest("job:report", key, "a-host", lease, 600.0, None, expiry)
    return Ticket.of(store.claim(req).record)


def test_jobs_list_shows_each_jobs_recent_slots(tmp_path: Path) -> None:
    path = tmp_path / "list.db"
    report = Cron("0 6 * * *", "Asia/Shanghai")  # the service's daily report
    with SQLiteStore(str(path)) as store:
        day = report.slot_at(store.now())
        days = [day - n * 86400 for n in range(5)]
        _claim(store, slot_key(days[0]), 60.0, ExpiryPolicy.TAKE_OVER)  # running now
        done = _claim(store, slot_key(days[1]), 60.0, ExpiryPolicy.TAKE_OVER)
        store.complete(done, b"null", "json", 600.0)
        failed = _claim(store, slot_key(days[2]), 60.0, ExpiryPolicy.TAKE_OVER)
        store.fail(failed, b'{"type": "OSError", "message": "disk full"}', 600.0)
        _claim(store, slot_key(days[3]), 0.05, ExpiryPolicy.UNKNOWN)  # its host died
        _claim(store, slot_key(days[4]), 0.05, ExpiryPolicy.TAKE_OVER)  # so did this one's
        time.sleep(0.1)
        _claim(store, slot_key(days[3]), 60.0, ExpiryPolicy.UNKNOWN)  # a scheduler finds out
        assert report.slot_at(store.now()) == day  # still the same day's slot
    result = cli("jobs", "list", "--store", f"sqlite:///{path}", "--json", "--recent", "6", SERVICE)
    assert result.exit_code == 0, result.output
    [tick, listed] = json.loads(result.output)
    assert (tick["job"], tick["schedule"], tick["missed"], tick["overlap"]) == (
        "tick",
        "every 1s",
        "latest",
        "wait",
    )
    assert listed["schedule"] == "cron '0 6 * * *' Asia/Shanghai"
    assert listed["external_effects"] is True
    assert listed["next_slot"].endswith("T22:00:00.000+00:00")  # 06:00 in Shanghai
    slots = listed["slots"]
    assert [s["slot"] for s in slots] == [slot_key(d) for d in [*days, day - 5 * 86400]]
    states = [s["state"] for s in slots]
    assert states == ["running", "done", "failed", "unknown", "stuck", "none"]
    assert slots[0]["fence"] == 1
    assert 0 <= slots[0]["age_seconds"] < 30
    text = cli("jobs", "list", "--store", f"sqlite:///{path}", SERVICE)
    assert text.exit_code == 0
    assert "report  cron '0 6 * * *' Asia/Shanghai" in text.output
    assert f"{slot_key(days[0])}  running for " in text.output


def test_jobs_commands_refuse_what_is_not_a_jobs_registry(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'x.db'}"
    for target, error in (
        ("tests.cli.jobs_service", "module:attribute"),
        ("tests.cli.jobs_service:nothing", "tests.cli.jobs_service has no nothing"),
        ("tests.cli.no_such_module:jobs", "No module named"),
        ("tests.cli.jobs_service:not_jobs", "not a Jobs registry"),
    ):
        result = cli("jobs", "list", "--store", store, target)
        assert result.exit_code == 2, target
        assert error in result.output, result.output


@pytest.mark.parametrize("loop", [[], ["--async"]])
def test_jobs_run_stops_on_sigterm_once_the_running_job_ended(
    tmp_path: Path, loop: list[str]
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), MIDENG_TEST_JOBS_DIR=str(out))
    store = f"sqlite:///{tmp_path / 'run.db'}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mideng", "jobs", "run", "--store", store, *loop, SERVICE],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    try:
        end = time.monotonic() + 20
        while not list(out.glob("*.started")) and time.monotonic() < end:
            time.sleep(0.02)
        started = list(out.glob("*.started"))
        assert started, "no slot started"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        ended = {p.name.removesuffix(".ended") for p in out.glob("*.ended")}
        assert {p.name.removesuffix(".started") for p in out.glob("*.started")} == ended
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_once_refuses_a_slot_whose_host_died_mid_run_with_external_effects(tmp_path: Path) -> None:
    path = tmp_path / "once.db"
    name = f"charge{uuid.uuid4().hex[:6]}"
    slot = held_elsewhere(path, name, 0.05, ExpiryPolicy.UNKNOWN)
    time.sleep(0.1)  # the other host died: its lease ran out
    store_url = f"sqlite:///{path}"
    args = ("once", name, "--store", store_url, "--every", "1h", "--external-effects", "--", "true")
    result = cli(*args)
    assert result.exit_code == 1
    assert f"mideng resolve job:{name} {slot}" in result.output


@contextmanager
def once_process(tmp_path: Path, name: str, script: str) -> Iterator[subprocess.Popen[str]]:
    """``mideng once`` as a process of its own, running ``script`` (sh) for the current
    hourly slot of job ``name``; killed if still running at the end."""
    store = f"sqlite:///{tmp_path / 'once.db'}"
    argv = ["once", name, "--store", store, "--every", "1h", "--", "sh", "-c", script]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    with subprocess.Popen(
        [sys.executable, "-m", "mideng", *argv], env=env, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.kill()


def wait_for(path: Path) -> None:
    end = time.monotonic() + 20
    while not path.exists() and time.monotonic() < end:
        time.sleep(0.02)
    assert path.exists(), f"{path.name} never appeared"


def slot_record(tmp_path: Path, name: str) -> tuple[str, bytes | None, bytes | None]:
    """The status, kept error and result of job ``name``'s current hourly slot."""
    with SQLiteStore(str(tmp_path / "once.db")) as store:
        record = store.get(f"job:{name}", slot_key(Every(3600).slot_at(time.time())))
    assert record is not None
    return record.status.value, record.error, record.result


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_once_passes_a_stop_signal_on_to_a_command_that_traps_it(
    tmp_path: Path, sig: signal.Signals
) -> None:
    started, caught = tmp_path / "started", tmp_path / "caught"
    # The command finishes its work when told to stop: it traps the signal and exits 3.
    script = (
        f"trap 'echo {sig.name} > {caught}; exit 3' {sig.name.removeprefix('SIG')}; "
        f"touch {started}; while true; do sleep 0.05; done"
    )
    name = f"trap{uuid.uuid4().hex[:6]}"
    with once_process(tmp_path, name, script) as proc:
        wait_for(started)
        proc.send_signal(sig)
        assert proc.wait(10) == 3  # the command's own exit
    assert caught.read_text() == f"{sig.name}\n"  # once: mideng once passed it on, itself alive
    status, _error, result = slot_record(tmp_path, name)
    assert status == "succeeded"
    assert result is not None
    assert json.loads(result) == {"exit_code": 3}


def test_once_keeps_the_slot_of_a_command_a_signal_killed_as_failed(tmp_path: Path) -> None:
    started = tmp_path / "started"
    name = f"killed{uuid.uuid4().hex[:6]}"
    # Neither sh nor the sleep it becomes traps SIGTERM: whichever it meets dies of it.
    with once_process(tmp_path, name, f"touch {started}; exec sleep 30") as proc:
        wait_for(started)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 128 + signal.SIGTERM
        assert proc.stderr is not None
        assert "killed by SIGTERM" in proc.stderr.read()
    status, error, _result = slot_record(tmp_path, name)
    assert status == "failed"
    assert error is not None
    assert b"killed by SIGTERM" in error
    marker = tmp_path / "again"
    store = f"sqlite:///{tmp_path / 'once.db'}"
    again = cli("once", name, "--store", store, "--every", "1h", "--", "touch", str(marker))
    assert again.exit_code == 0, again.output
    assert "done" in again.output
    assert not marker.exists()  # a failed slot is not run again
