"""A store URL or option the command can't use is a usage error (exit 2, one line), never a
traceback: an unparsable port, a query option the store does not take or can't read, a
negative --limit, a bad table name or URL given to ``schema``."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner, Result

from mideng.cli import main
from tests.services import POSTGRES_URL, need


def cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def usage(done: Result, args: tuple[str, ...]) -> None:
    assert done.exit_code == 2, (args, done.output, done.exception)
    assert done.exception is None or isinstance(done.exception, SystemExit), (args, done.exception)
    assert "Traceback" not in done.output, args
    assert "Error:" in done.output, (args, done.output)


def test_store_urls_the_store_refuses_are_usage_errors(tmp_path: Path) -> None:
    db = tmp_path / "u.db"
    for args in (
        ("stats", "--store", f"sqlite:///{db}?timeout=soon"),
        ("inspect", "--store", f"sqlite:///{db}?no_such_option=1", "pay", "k"),
        ("unresolved", "--store", "postgresql://postgres@127.0.0.1:port/test"),
        ("purge", "--store", "postgresql://postgres@127.0.0.1:5432/test?pool_size=many"),
    ):
        usage(cli(*args), args)


def test_a_negative_limit_is_a_usage_error(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'l.db'}"
    for args in (
        ("unresolved", "--store", db, "--limit", "-1"),
        ("unresolved", "--store", db, "--limit", "-1", "--json"),
        ("purge", "--store", db, "--limit", "-5"),
    ):
        usage(cli(*args), args)


def test_a_negative_limit_never_reaches_the_database_as_a_store_failure() -> None:
    need("postgresql")
    args = ("unresolved", "--store", POSTGRES_URL, "--limit", "-1")
    usage(cli(*args), args)


def test_schema_usage_errors_exit_2(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    for args in (
        ("schema", "--url", db, "--table", "bad-name"),
        ("schema", "--url", "nosuch://x"),
        ("schema", "--url", "postgresql://postgres@127.0.0.1:port/test", "--apply"),
        ("schema", "--url", f"{db}?timeout=soon", "--apply"),
    ):
        usage(cli(*args), args)
    applied = cli("schema", "--url", db, "--apply")
    assert applied.exit_code == 0, applied.output
