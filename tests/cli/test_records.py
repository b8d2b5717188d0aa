from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from click.testing import CliRunner

from mideng import Guard, open_store
from mideng.cli import main
from mideng.core.record import ClaimRequest, ExpiryPolicy
from tests.cli.stores import url

__all__ = ["url"]  # the fixture: SQLite and MariaDB


def ran() -> object:
    return "ran"


def test_inspect_resolve_release_purge(url: str) -> None:
    guard = Guard(open_store(url))
    guard.run("pay", "t1", lambda: {"ok": True})
    guard.store.claim(
        ClaimRequest("charge", "c1", uuid.uuid4().hex, 0.1, 60, None, ExpiryPolicy.UNKNOWN)
    )
    cli = CliRunner()

    shown = cli.invoke(main, ["inspect", "--store", url, "pay", "t1"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["result"] == {"ok": True}
    missing = cli.invoke(main, ["inspect", "--store", url, "pay", "nope"])
    assert missing.exit_code == 1
    assert "no record for pay:nope" in missing.output

    # A record that expires while the charge's lease runs out, for purge below.
    Guard(guard.store, ttl=0.05).run("pay", "t2", lambda: {"ok": True})
    time.sleep(0.3)
    listed = cli.invoke(main, ["unresolved", "--store", url])
    assert listed.exit_code == 1  # found some: a script's cue to look
    assert "charge" in listed.output
    assert "c1" in listed.output

    both = cli.invoke(main, ["resolve", "--store", url, "charge", "c1"])
    assert both.exit_code == 2
    settled = cli.invoke(
        main, ["resolve", "--store", url, "charge", "c1", "--result", '{"charged": true}']
    )
    assert settled.exit_code == 0, settled.output
    assert guard.run("charge", "c1", ran) == {"charged": True}

    purged = cli.invoke(main, ["purge", "--store", url])
    assert purged.exit_code == 0
    assert "purged 1 expired record(s)" in purged.output  # pay:t2
    assert guard.get("pay", "t1") is not None

    evicted = cli.invoke(main, ["release", "--store", url, "--yes", "charge", "c1"])
    assert evicted.exit_code == 0
    assert "evicted" in evicted.output
    assert guard.get("charge", "c1") is None
    guard.close()


def test_bad_store_url_is_a_clear_error() -> None:
    result = CliRunner().invoke(main, ["purge", "--store", "nosuch://x"])
    assert result.exit_code == 2  # a usage error: the URL names no store
    assert "no store for scheme 'nosuch'" in result.output


def test_bad_scopes_and_keys_are_usage_errors_not_tracebacks(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    guard = Guard(open_store(url))
    guard.run("pay", "t1", ran)
    guard.close()
    cli = CliRunner()
    # A shell passes undecodable argv bytes on as lone surrogates (surrogateescape).
    for args in (
        ["inspect", "--store", url, "token:form", "t1"],
        ["inspect", "--store", url, "pay", "t1\udcff"],
        ["resolve", "--store", url, "hit:form", "t1", "--failed"],
        ["resolve", "--store", url, "pay\udcff", "t1", "--failed"],
        ["release", "--store", url, "--yes", "token:form", "t1"],
        ["release", "--store", url, "--yes", "pay", "t1\udcff"],
        ["unresolved", "--store", url, "--scope", "pay\udcff"],
    ):
        done = cli.invoke(main, args)
        assert done.exit_code == 2, (args, done.output)  # usage: the scope or key is refused
        assert done.exception is None or isinstance(done.exception, SystemExit), args
        assert "reserved for" in done.output or "lone surrogate" in done.output, done.output
    shown = cli.invoke(main, ["inspect", "--store", url, "pay", "t1"])
    assert shown.exit_code == 0, shown.output
    listed = cli.invoke(main, ["unresolved", "--store", url, "--scope", "pay"])
    assert listed.exit_code == 0, listed.output
