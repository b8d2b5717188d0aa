"""APScheduler 4 hosts running one mideng job: three processes (two ``Scheduler``, one
``AsyncScheduler``), each with its own data store, run each slot once, and the slot of a
host killed mid-run is taken over by another when its lease ends.

APScheduler 3 (the ``apscheduler`` extra, installed here) and 4 cannot share one
environment, so the hosts run with APScheduler 4 installed apart (``pip install --target``)
first on their path; the install is made once per version and kept under the temporary
folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from mideng.jobs import slot_key
from tests.jobs.hosts import ready_hosts
from tests.services import required

VERSION = "4.0.0a6"
HOST = Path(__file__).parents[1] / "helpers" / "apscheduler4_host.py"


def install_apscheduler4() -> Path:
    """A folder holding APScheduler ``VERSION`` and its dependencies, installed from the
    package index on first use (skipped when that is not possible, failed under
    MIDENG_REQUIRE_SERVICES=1)."""
    home = Path(tempfile.gettempdir()) / f"mideng-apscheduler-{VERSION}"
    if (home / "apscheduler").is_dir():
        return home
    staging = Path(tempfile.mkdtemp(prefix=f"{home.name}.", dir=home.parent))
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(staging)]
    done = subprocess.run(
        [*pip, f"apscheduler=={VERSION}"], check=False, capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        message = f"cannot install apscheduler=={VERSION}: {done.stderr.strip()[-500:]}"
        if required():
            pytest.fail(message + " and MIDENG_REQUIRE_SERVICES=1")
        pytest.skip(message)
    try:
        staging.rename(home)  # whole, so a folder at ``home`` is a finished install
    except OSError:  # another run installed it first
        shutil.rmtree(staging, ignore_errors=True)
    return home


@pytest.fixture(scope="session")
def apscheduler4() -> Path:
    return install_apscheduler4()


def test_the_trigger_fires_at_slot_starts(apscheduler4: Path) -> None:
    """The trigger's fires, its state through pickle (a persistent data store's), and the
    scheduler it is given to, all under APScheduler 4."""
    check = """
import pickle, time
from datetime import datetime, timezone
from mideng.jobs import Cron, Every
from mideng.jobs.apscheduler4 import SlotTrigger

now = time.time()
trigger = SlotTrigger(Every(10))
first = trigger.next().timestamp()
assert first % 10 == 0 and now <= first <= now + 10, (now, first)
assert trigger.next().timestamp() == first + 10
again = pickle.loads(pickle.dumps(trigger))
assert again.next().timestamp() == first + 20
assert trigger.next().timestamp() == first + 20
weekly = SlotTrigger(Cron("0 6 * * 0", "Asia/Shanghai"))
fire = weekly.next()
assert fire.weekday() == 5 and (fire.hour, fire.minute) == (22, 0), fire
assert (weekly.next() - fire).days == 7
print("ok")
"""
    assert run_python(apscheduler4, check).stdout.strip() == "ok"


def run_python(apscheduler4: Path, code: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        env=host_env(apscheduler4),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done


def host_env(apscheduler4: Path) -> dict[str, str]:
    """APScheduler 4 first on the path, ahead of the 3.x of this environment."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(apscheduler4), *sys.path]))


def arrived(folder: Path, pattern: str) -> None:
    """Wait until a file matching ``pattern`` is in ``folder`` (20 s at most)."""
    end = time.monotonic() + 20
    while not list(folder.glob(pattern)):
        assert time.monotonic() < end, f"no {pattern} in {sorted(p.name for p in folder.iterdir())}"
        time.sleep(0.05)


@pytest.mark.slow
def test_three_apscheduler4_hosts_run_each_slot_once_and_take_over_a_dead_hosts(
    apscheduler4: Path, tmp_path: Path
) -> None:
    out = tmp_path / "runs"
    out.mkdir()
    store = f"sqlite:///{tmp_path / 'store.db'}"
    name = f"aps4{uuid.uuid4().hex[:8]}"
    argv = [sys.executable, str(HOST), store, name, str(out)]
    commands = [[*argv, mode] for mode in ("sync", "sync", "async")]
    with ready_hosts(commands, host_env(apscheduler4)) as hosts:
        doomed = int(time.time()) + 2  # a slot every host sees
        for host in hosts:
            assert host.stdin is not None
            host.stdin.write(f"{doomed}\n")
            host.stdin.flush()
        # Runs go on after the take-over (at the end of the dead host's 2 s lease).
        arrived(out, f"done.{slot_key(doomed)}.2.*")
        arrived(out, f"done.{slot_key(doomed + 5)}.1.*")
        for host in hosts:
            assert host.stdin is not None
            host.stdin.close()  # the hosts stop
        codes = sorted(host.wait(20) for host in hosts)
    assert codes == [-9, 0, 0]  # the host that claimed the doomed slot died of SIGKILL
    runs = [path.name.split(".") for path in out.iterdir()]
    starts = Counter(slot for kind, slot, _fence, _pid in runs if kind == "start")
    done = {slot: (int(fence), pid) for kind, slot, fence, pid in runs if kind == "done"}
    ended = Counter(slot for kind, slot, _fence, _pid in runs if kind == "done")
    assert len(ended) >= 6, ended
    assert set(ended.values()) == {1}, ended  # each slot ran to its end once
    doomed_key = slot_key(doomed)
    assert starts.pop(doomed_key) == 2  # the dead host's run, then the take-over
    assert done[doomed_key][0] == 2  # taken over under the next fence
    assert set(starts.values()) == {1}, starts
    assert {fence for fence, _pid in done.values()} == {1, 2}
    slots = sorted(time.mktime(time.strptime(key, "%Y-%m-%dT%H:%M:%SZ")) for key in ended)
    assert slots == [slots[0] + n for n in range(len(slots))]  # no slot left out
