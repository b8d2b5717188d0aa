"""Every command on input an operator, or a script gone wrong, may give it: a store URL that is
malformed (a port that is no number or out of range, an unknown scheme, no host or no file,
bytes that are not UTF-8, an option the store can't read), a store nothing answers on,
counts and durations out of range, empty or undecodable text, options and commands that don't
exist. Each answer is one ``Error`` line (below click's usage lines for a usage error) and
exit 2 for usage, 1 for a store that failed; never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from mideng.cli import main
from tests.brokers import spare_port
from tests.services import POSTGRES_URL, need

USAGE, RUNTIME = 2, 1

# Each command that opens a store, given the store's URL.
COMMANDS: dict[str, Callable[[str], tuple[str, ...]]] = {
    "stats": lambda url: ("stats", "--store", url),
    "scan": lambda url: ("scan", "--store", url),
    "inspect": lambda url: ("inspect", "--store", url, "pay", "k1"),
    "unresolved": lambda url: ("unresolved", "--store", url),
    "resolve": lambda url: ("resolve", "--store", url, "pay", "k1", "--failed"),
    "release": lambda url: ("release", "--store", url, "--yes", "pay", "k1"),
    "purge": lambda url: ("purge", "--store", url),
    "pending": lambda url: ("operations", "pending", "--store", url),
    "reconcile": lambda url: ("operations", "reconcile", "--store", url),
    "stale": lambda url: ("operations", "stale", "--store", url),
    "demo": lambda url: ("demo", "--store", url),
    "schema": lambda url: ("schema", "--url", url, "--apply"),
}

# Store URLs no store can use, whatever the command ({dir}: the test's directory).
MALFORMED = {
    "port-no-number": "postgresql://root@127.0.0.1:notaport/test",
    "port-out-of-range": "mysql://root@127.0.0.1:99999/test",
    "redis-port": "redis://127.0.0.1:x/0",
    "redis-database": "redis://127.0.0.1:6379/records",
    "unknown-scheme": "nosuch://x",
    "no-scheme": "127.0.0.1:5432",
    "empty": "",
    "no-file": "sqlite://",
    "no-nodes": "redis+cluster://",
    "no-host-name": "redis://a..b:6379/0",
    "not-utf8-host": "postgresql://root@127.0.0.1\udcff/test",
    "not-utf8-path": "sqlite:///{dir}/records\udcff.db",
    "option-unreadable": "sqlite:///{dir}/records.db?timeout=soon",
    "option-unknown": "sqlite:///{dir}/records.db?no_such_option=1",
    "pool-size": "postgresql://root@127.0.0.1:5432/test?pool_size=many",
}

# Stores nothing answers on ({port}: a port nothing listens on).
UNREACHABLE = {
    "postgresql": "postgresql://root@127.0.0.1:{port}/test",
    "mysql": "mysql://root@127.0.0.1:{port}/test",
    "redis": "redis://127.0.0.1:{port}/0",
    "sqlite": "sqlite:///{dir}/missing/records.db",
}
# schema speaks SQL only (a Redis URL is a usage error there), and purge never asks Redis,
# which expires records itself.
NOT_ASKED = {("schema", "redis"), ("purge", "redis")}

# Counts and durations out of range, on a store that works.
LIMITS = ("-5", "0", "nan", str(2**63))
DURATIONS = ("nan", "inf", "-1", "9" * 400)
OUT_OF_RANGE = [
    *(("unresolved", "--limit", n) for n in LIMITS),
    *(("operations", s, "--limit", n) for s in ("pending", "reconcile", "stale") for n in LIMITS),
    ("purge", "--limit", "-5"),
    *(("operations", "stale", "--older-than", d) for d in DURATIONS),
    *(("purge", "--older-than", d) for d in DURATIONS),
    *((survey, "--grace", d) for survey in ("stats", "scan") for d in DURATIONS),
    ("scan", "--biggest", "-1"),
    ("scan", "--biggest", str(2**63)),
]

# Text no store can hold or no command takes, options and commands that don't exist.
REFUSED = [
    ("inspect", "", "k1"),
    ("inspect", "pay", ""),
    ("inspect", "pay\udcff", "k1"),
    ("release", "--yes", "pay", "k1\udcff"),
    ("unresolved", "--scope", ""),
    ("operations", "pending", "--scope", "\udcff"),
    ("operations", "stale", "--scope", ""),
    ("stats", "--prefix", "pay\udcff"),
    ("scan", "--prefix", "\udcff"),
    ("resolve", "pay", "k1"),
    ("resolve", "pay", "k1", "--result", "{not json"),
    ("resolve", "pay", "k1", "--result", "[" * 100_000),
    ("resolve", "pay", "k1", "--result", "NaN"),
    ("resolve", "pay", "k1", "--result", "[1e999]"),
    ("stats", "--no-such-option"),
    ("operations", "pending", "--no-such-option"),
    ("operations", "pending", "--guard", "no_such_module_at_all:guard"),
    ("operations", "pending", "--guard", "tests.operations.shop"),
    ("operations", "pending", "--guard", "json:no_such_attribute"),
    ("operations", "reconcile", "--guard", "json:loads"),
    ("schema", "--table", "bad-name"),
]


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def answered(done: Result, args: tuple[str, ...], code: int) -> None:
    """The command ended (no exception out of it) with ``code`` and one error line."""
    assert isinstance(done.exception, SystemExit), (args, repr(done.exception))
    assert done.exit_code == code, (args, done.stderr)
    one_error(done.stderr, code)


def one_error(stderr: str, code: int) -> None:
    """One Error line; above a usage error, click's usage lines and nothing else."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("Error")]
    assert len(errors) == 1, stderr
    others = [line for line in lines if line not in errors]
    if code == USAGE:
        assert all(line.startswith(("Usage:", "Try ")) for line in others), stderr
    else:
        assert others == [], stderr


@pytest.mark.parametrize("url", MALFORMED.values(), ids=MALFORMED.keys())
@pytest.mark.parametrize("command", COMMANDS)
def test_a_malformed_store_url_is_a_usage_error(command: str, url: str, tmp_path: Path) -> None:
    args = COMMANDS[command](url.format(dir=tmp_path))
    answered(cli(*args), args, USAGE)


@pytest.mark.parametrize(
    ("command", "kind"),
    [(c, k) for c in COMMANDS for k in UNREACHABLE if (c, k) not in NOT_ASKED],
)
def test_a_store_nothing_answers_on_is_one_error_and_exit_1(
    command: str, kind: str, tmp_path: Path
) -> None:
    args = COMMANDS[command](UNREACHABLE[kind].format(port=spare_port(), dir=tmp_path))
    answered(cli(*args), args, RUNTIME)


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
@pytest.mark.parametrize("args", OUT_OF_RANGE, ids=" ".join)
def test_counts_and_durations_out_of_range_are_usage_errors_on_every_store(
    args: tuple[str, ...], store: str, tmp_path: Path
) -> None:
    if store == "postgresql":
        need("postgresql")
    url = POSTGRES_URL if store == "postgresql" else f"sqlite:///{tmp_path / 'n.db'}"
    done = cli(*args, "--store", url)
    answered(done, args, USAGE)


@pytest.mark.parametrize("args", REFUSED, ids=lambda args: repr(args)[:60])
def test_refused_text_and_unknown_options_are_usage_errors(
    args: tuple[str, ...], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 't.db'}"
    store = ("--url", db) if args[0] == "schema" else ("--store", db)
    answered(cli(*args, *store), args, USAGE)


@pytest.mark.parametrize("args", [("nosuch",), ("operations", "nosuch")], ids=" ".join)
def test_an_unknown_command_is_a_usage_error(args: tuple[str, ...]) -> None:
    answered(cli(*args), args, USAGE)


def test_a_guard_module_that_fails_to_import_is_one_error_and_exit_1() -> None:
    args = ("operations", "pending", "--guard", "tests.cli.broken_service:guard")
    done = cli(*args)
    answered(done, args, RUNTIME)
    assert "RuntimeError: PAYMENTS_DB is not set" in done.stderr


def test_a_driver_message_over_several_lines_is_one_line() -> None:
    # libpq's refusal carries a second line ("Is the server running on that host...").
    need("postgresql")
    args = ("unresolved", "--store", f"postgresql://root@127.0.0.1:{spare_port()}/test")
    done = cli(*args)
    answered(done, args, RUNTIME)
    assert "Connection refused" in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        (b"stats", b"--store", b"postgresql://root@127.0.0.1\xff/test"),
        (b"operations", b"pending", b"--store", b"redis://127.0.0.1\xfe:6379/0"),
        (b"inspect", b"--store", b"sqlite:///{dir}/b.db", b"pay\xff", b"k1"),
        (b"scan", b"--store", b"sqlite:///{dir}/b.db", b"--prefix", b"\xff"),
    ],
    ids=lambda args: " ".join(a.decode(errors="replace") for a in args),
)
def test_bytes_that_are_not_utf8_on_the_command_line_are_usage_errors(
    args: tuple[bytes, ...], tmp_path: Path
) -> None:
    """The real entry, as a shell runs it: Python decodes argv with surrogateescape."""
    argv = [a.replace(b"{dir}", bytes(tmp_path)) for a in args]
    done = subprocess.run(
        [sys.executable, "-m", "mideng", *argv],
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
        capture_output=True,
        timeout=60,
        check=False,
    )
    stderr = done.stderr.decode("utf-8", "backslashreplace")
    assert done.returncode == USAGE, stderr
    one_error(stderr, USAGE)


def test_schema_prints_and_applies_on_a_good_url(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    for args in (("schema", "--url", "nosuch://x"), ("schema", "--url", db, "--table", "b-d")):
        answered(cli(*args), args, USAGE)
    applied = cli("schema", "--url", db, "--apply")
    assert applied.exit_code == 0, applied.output
    assert "record table mideng_records: absent, to version" in applied.stderr
