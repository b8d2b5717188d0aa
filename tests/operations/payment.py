"""The payment story as a process: mark paid -> issue coupon -> add points -> send SMS.

Each step appends its effect to a file (one line per effect, O_APPEND), so a test counts how
many times each effect happened. Run as a script it pays one order per argument, dying with
SIGKILL where ``MIDENG_DIE_AFTER`` says (after step n returned, 4: after the last step, before
the operation returns), or pausing after step ``MIDENG_PAUSE_AFTER`` until a ``go`` file
appears. Exit codes: 0 paid, 3 a step's record was refused (LeaseLostError).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mideng import Guard, open_store
from mideng.errors import InProgressError, LeaseLostError
from mideng.operations import step_key

STEPS = ("mark_paid", "issue_coupon", "add_points", "send_sms")


class Provider:
    """A payment provider that dedupes charges by Idempotency-Key (a SQLite file, so every
    process sees the same one): every call is logged, one charge per key is kept."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT, amount INTEGER)")
            db.execute("CREATE TABLE IF NOT EXISTS charges (key TEXT PRIMARY KEY, amount INT)")

    def charge(self, key: str, amount: int) -> str:
        with sqlite3.connect(self.path) as db:
            db.execute("INSERT INTO calls VALUES (?, ?)", (key, amount))
            db.execute("INSERT OR IGNORE INTO charges VALUES (?, ?)", (key, amount))
        return f"ch_{key[-8:]}"

    def count(self, table: str) -> int:
        with sqlite3.connect(self.path) as db:
            return int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def keys(self) -> list[str]:
        with sqlite3.connect(self.path) as db:
            return [row[0] for row in db.execute("SELECT key FROM calls")]


def effects(work: Path) -> list[str]:
    path = work / "effects"
    return path.read_text().splitlines() if path.exists() else []


def build(
    url: str,
    options: dict[str, Any],
    work: Path,
    lease: float,
    *,
    die_after: int = 0,
    pause_after: int = 0,
    hooks: dict[str, Callable[[], None]] | None = None,
    step_time: float = 0.0,
) -> tuple[Guard, Callable[[str], dict[str, Any]], Callable[[str, int], str]]:
    guard = Guard(open_store(url, **options), lease=lease)
    provider = Provider(work / "provider.db")
    hooks = hooks or {}

    def effect(name: str, order: str) -> str:
        if name in hooks:
            hooks[name]()
        time.sleep(step_time)
        fd = os.open(work / "effects", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            os.write(fd, f"{name}:{order}\n".encode())
        finally:
            os.close(fd)
        return f"{name}:{order}:{os.getpid()}"

    def checkpoint(n: int) -> None:
        if die_after == n:
            os.kill(os.getpid(), signal.SIGKILL)
        if pause_after == n:
            (work / f"paused-{n}").write_text(str(os.getpid()))
            end = time.monotonic() + 60
            while not (work / "go").exists():
                assert time.monotonic() < end, "never told to go on"
                time.sleep(0.01)

    @guard.step("mark_paid")
    def mark_paid(order: str) -> str:
        return effect("mark_paid", order)

    @guard.step("issue_coupon")
    def issue_coupon(order: str) -> str:
        return effect("issue_coupon", order)

    @guard.step("add_points")
    def add_points(order: str) -> str:
        return effect("add_points", order)

    @guard.step("send_sms")
    def send_sms(order: str) -> str:
        return effect("send_sms", order)

    @guard.operation("pay_notify", key="{order}", steps=STEPS)
    def pay(order: str) -> dict[str, Any]:
        done = {"paid": mark_paid(order)}
        checkpoint(1)
        done["coupon"] = issue_coupon(order)
        checkpoint(2)
        done["points"] = add_points(order)
        checkpoint(3)
        done["sms"] = send_sms(order)
        checkpoint(4)
        done["by"] = str(os.getpid())
        return done

    @guard.step("charge")
    def charge(order: str, amount: int) -> str:
        charged = provider.charge(step_key(), amount)
        # Killed after the provider took the charge and before the step's record.
        checkpoint(9)
        return charged

    @guard.operation("checkout", key="{order}")
    def checkout(order: str, amount: int) -> str:
        return charge(order, amount)

    return guard, pay, checkout


def main() -> int:
    url, options, workdir, lease, what, *orders = sys.argv[1:]
    guard, pay, checkout = build(
        url,
        json.loads(options),
        Path(workdir),
        float(lease),
        die_after=int(os.environ.get("MIDENG_DIE_AFTER", "0")),
        pause_after=int(os.environ.get("MIDENG_PAUSE_AFTER", "0")),
        step_time=float(os.environ.get("MIDENG_STEP_TIME", "0")),
    )
    work = Path(workdir)
    if os.environ.get("MIDENG_WAIT_GO"):  # a race: start with the others
        (work / f"ready-{os.getpid()}").write_text("ready")
        while not (work / "race-go").exists():
            time.sleep(0.005)
    try:
        for order in orders:
            while True:
                try:
                    if what == "pay":
                        pay(order)
                    else:
                        checkout(order, 1250)
                    break
                except InProgressError:  # another caller is paying it: ask again
                    time.sleep(0.01)
    except LeaseLostError:
        return 3
    finally:
        guard.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
