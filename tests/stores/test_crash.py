"""Crash tests: a real holder process is SIGKILLed or SIGSTOPped in the middle of its body."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mideng import Guard, Status
from mideng.errors import InProgressError, UnresolvedError
from tests.backends import Opened

HOLDER = Path(__file__).parents[1] / "helpers" / "holder.py"
LEASE = 1.0

pytestmark = pytest.mark.slow


class Holder:
    def __init__(
        self, opened: Opened, workdir: Path, scope: str, key: str, on_expiry: str = "take_over"
    ) -> None:
        assert opened.url is not None
        self.workdir = workdir
        workdir.mkdir()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(HOLDER),
                opened.url,
                json.dumps(opened.options),
                scope,
                key,
                str(LEASE),
                on_expiry,
                str(workdir),
            ],
            env=env,
        )
        until(lambda: (workdir / "started").exists() or self.proc.poll() is not None, 60)
        assert self.proc.poll() is None, "holder died before its body started"

    def kill(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def go_on(self) -> int:
        (self.workdir / "go").write_text("go")
        return self.proc.wait(60)


def until(condition: Callable[[], bool], seconds: float) -> None:
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.02)


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    started: list[Holder] = []
    yield started
    for holder in started:
        if holder.proc.poll() is None:
            holder.proc.kill()
            holder.proc.wait(10)


def again() -> object:
    return "again"


def take_over(guard: Guard, scope: str, key: str, body: Callable[[], object]) -> object:
    """Call until the dead holder's lease runs out; every refusal before that is asserted."""
    end = time.monotonic() + 30
    while True:
        try:
            return guard.run(scope, key, body)
        except InProgressError:
            assert time.monotonic() < end, "lease never expired"
            time.sleep(0.05)


def test_sigkilled_holder_is_taken_over(
    shared: Opened, tmp_path: Path, holders: list[Holder]
) -> None:
    guard = Guard(shared.store, lease=LEASE)
    holder = Holder(shared, tmp_path / "h", "crash", "k1")
    holders.append(holder)
    # The holder renews its lease while alive: a caller is refused well past one lease.
    time.sleep(LEASE * 1.5)
    with pytest.raises(InProgressError):
        guard.run("crash", "k1", lambda: "early")
    holder.kill(signal.SIGKILL)
    holder.proc.wait(10)
    assert take_over(guard, "crash", "k1", lambda: {"by": "successor"}) == {"by": "successor"}
    record = guard.get("crash", "k1")
    assert record is not None
    assert record.fence == 2
    assert record.status is Status.SUCCEEDED
    assert guard.run("crash", "k1", again) == {"by": "successor"}


def test_sigstopped_zombie_is_fenced(shared: Opened, tmp_path: Path, holders: list[Holder]) -> None:
    guard = Guard(shared.store, lease=LEASE)
    holder = Holder(shared, tmp_path / "h", "crash", "k2")
    holders.append(holder)
    holder.kill(signal.SIGSTOP)
    assert take_over(guard, "crash", "k2", lambda: {"by": "successor"}) == {"by": "successor"}
    holder.kill(signal.SIGCONT)
    assert holder.go_on() == 3, "the zombie's late completion was not fenced"
    record = guard.get("crash", "k2")
    assert record is not None
    assert record.status is Status.SUCCEEDED
    assert guard.run("crash", "k2", again) == {"by": "successor"}


def test_sigkilled_holder_of_irreversible_work_becomes_unknown(
    shared: Opened, tmp_path: Path, holders: list[Holder]
) -> None:
    guard = Guard(shared.store, lease=LEASE)
    guard.configure_scope("charge", on_expiry="unknown")
    holder = Holder(shared, tmp_path / "h", "charge", "c1", on_expiry="unknown")
    holders.append(holder)
    holder.kill(signal.SIGKILL)
    holder.proc.wait(10)
    ran: list[str] = []
    end = time.monotonic() + 30
    while True:
        try:
            guard.run("charge", "c1", lambda: ran.append("charged"))
        except InProgressError:
            assert time.monotonic() < end
            time.sleep(0.05)
            continue
        except UnresolvedError:
            break
    assert ran == []
    assert [(r.scope, r.key, r.status) for r in guard.unresolved("charge")] == [
        ("charge", "c1", Status.UNKNOWN)
    ]
    with pytest.raises(UnresolvedError):
        guard.run("charge", "c1", lambda: ran.append("charged"))
    guard.resolve("charge", "c1", result={"charged": True, "provider_ref": "ch_1"})
    assert guard.run("charge", "c1", lambda: ran.append("charged")) == {
        "charged": True,
        "provider_ref": "ch_1",
    }
    assert ran == []
