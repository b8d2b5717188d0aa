from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import mideng
from mideng import Guard, open_store
from mideng.cli import main
from mideng.core.record import ClaimRequest
from tests.cli.stores import url

__all__ = ["url"]  # the fixture: SQLite and MariaDB


SHOP_RECONCILE = ("operations", "reconcile", "--guard", "tests.operations.shop:guard")


def _json(output: str, listed: str = "operations") -> list[dict[str, Any]]:
    """The rows of a command's JSON document, checked against its count. Only the document:
    an application may send the mideng logger's lines to stdout too."""
    document = json.loads(output[output.index("{") :])
    assert document["count"] == len(document[listed])
    rows: list[dict[str, Any]] = document[listed]
    return rows


def test_pending_reconcile_and_stale(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIDENG_TEST_SHOP_STORE", url)
    monkeypatch.setenv("MIDENG_TEST_SHOP_DOWN", "1")
    monkeypatch.delitem(sys.modules, "tests.operations.shop", raising=False)
    # Imported afresh for this store: ``from tests.operations import shop`` would find the
    # module an earlier test left on the package.
    shop: Any = importlib.import_module("tests.operations.shop")

    with pytest.raises(RuntimeError):
        shop.notify("o1")
    cli = CliRunner()
    listed = cli.invoke(main, ["operations", "pending", "--store", url, "--json"])
    assert listed.exit_code == 0, listed.output
    (row,) = _json(listed.stdout)
    assert (row["key"], row["state"], row["registered"]) == ("o1", "released", False)
    # Typed values: a list of steps, null for steps not declared to this store, a time or null.
    assert (row["steps_done"], row["steps_left"]) == ([], None)
    assert isinstance(row["since"], str)
    table = cli.invoke(main, ["operations", "pending", "--guard", "tests.operations.shop:guard"])
    assert table.exit_code == 0
    assert "send_sms" in table.output
    # The store alone cannot run it: reported, and the exit code says so.
    young = cli.invoke(main, ["operations", "reconcile", "--store", url, "--json"])
    assert young.exit_code == 0, young.output  # begun just now: its caller's to retry
    (left,) = _json(young.stdout)
    assert left["outcome"] == "left_to_caller"
    assert left["detail"].startswith("released, begun ")
    blind = cli.invoke(main, ["operations", "reconcile", "--store", url, "--min-age", "0"])
    assert blind.exit_code == 1
    assert "unregistered" in blind.stdout
    monkeypatch.delenv("MIDENG_TEST_SHOP_DOWN")
    # --plan says what it would do and does none of it.
    planned = cli.invoke(
        main,
        [*SHOP_RECONCILE, "--plan", "--min-age", "0", "--json"],
    )
    assert planned.exit_code == 0, planned.output
    assert [(r["key"], r["outcome"], r["detail"]) for r in _json(planned.stdout)] == [
        ("o1", "would_run", "released")
    ]
    assert shop.sent == ["o1"]
    still = cli.invoke(main, ["operations", "pending", "--store", url, "--json"])
    assert [r["key"] for r in _json(still.stdout)] == ["o1"]
    done = cli.invoke(
        main,
        [*SHOP_RECONCILE, "--json", "--min-age", "0s"],
    )
    assert done.exit_code == 0, done.output
    (finished,) = _json(done.stdout)
    assert (finished["outcome"], finished["detail"]) == ("finished", "sms:o1")  # not a repr
    assert shop.sent == ["o1", "o1"]
    empty = cli.invoke(main, ["operations", "pending", "--store", url, "--json"]).stdout
    assert json.loads(empty) == {"count": 0, "operations": []}  # the same shape when empty

    # A task whose holder died: stale, and --fail-on-any lets cron alert on it.
    Guard(open_store(url)).store.claim(ClaimRequest("export", "t1", "gone", 0.05, 60))
    time.sleep(0.1)
    stale = cli.invoke(main, ["operations", "stale", "--store", url, "--fail-on-any", "--json"])
    assert stale.exit_code == 1
    assert "stopped renewing" in _json(stale.stdout, "tasks")[0]["reason"]
    bad = cli.invoke(main, ["operations", "pending", "--guard", "tests.operations.shop"])
    assert bad.exit_code == 2


def test_guard_is_found_in_the_current_directory(tmp_path: Path) -> None:
    """``--guard module:attr`` named from the service's own folder, with the installed
    ``mideng`` script (whose sys.path does not hold the folder, unlike ``python -m``)."""
    store = f"sqlite:///{tmp_path / 'shop.db'}"
    (tmp_path / "payments_service.py").write_text(
        "from mideng import Guard, open_store\n"
        f"guard = Guard(open_store({store!r}))\n"
        "@guard.operation('notify', key='{order}', steps=('sms',))\n"
        "def notify(order: str) -> str:\n"
        "    return 'sent'\n"
    )
    script = Path(sys.executable).parent / "mideng"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(Path(mideng.__file__).parent.parent)  # this checkout's mideng
    for command in (["pending"], ["reconcile", "--plan"]):
        done = subprocess.run(
            [str(script), "operations", *command, "--guard", "payments_service:guard", "--json"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "No module named" not in done.stderr
    missing = subprocess.run(
        [str(script), "operations", "pending", "--guard", "elsewhere:guard"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 2
    assert "can't import elsewhere" in missing.stderr
