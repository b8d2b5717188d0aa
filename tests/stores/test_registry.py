from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mideng import Guard, open_store, register_store
from mideng.errors import ConfigurationError, StoreUnavailableError
from mideng.stores.memory import MemoryStore
from mideng.stores.registry import require
from mideng.stores.sqlite import SQLiteStore


def test_schemes_pick_backends(tmp_path: Path) -> None:
    assert isinstance(open_store("memory://"), MemoryStore)
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}?timeout=2&table=my_records")
    assert isinstance(store, SQLiteStore)
    assert store.table == "my_records"
    store.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("nosuch://x", "no store for scheme 'nosuch'"),
        ("not a url", "must look like scheme://"),
        ("sqlite://", "SQLite URL needs a file"),
        ("sqlite://host/x.db", "SQLite URL needs a file"),
        # Found from the URL alone, before any connection, the same on every store.
        ("postgresql://root@h:notaport/db", "Port could not be cast to integer value"),
        ("mysql://root@127.0.0.1:99999/db", "Port out of range"),
        ("redis://a..b:6379/0", "host 'a..b' is no host name"),
        ("redis://127.0.0.1:6379/records", "path is a database number"),
        ("postgresql://root@h\udcff/db", "not UTF-8"),
        ("sqlite:////nonexistent/x\udcff.db", "not UTF-8"),
        # A store reading its URL's options (int(), float(), its constructor's keywords).
        ("sqlite:////nonexistent/x.db?timeout=soon", "sqlite store refused its URL or options"),
        ("sqlite:////nonexistent/x.db?no_such=1", "is not one the store takes"),
        ("postgresql://root@h/db?pool_size=many", "postgresql store refused its URL or options"),
    ],
)
def test_bad_urls_are_clear_errors(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        open_store(url)


def test_a_list_of_hosts_is_left_to_the_store_that_reads_it() -> None:
    # urlsplit reads "h1:26379,h2:26379" as one host with the port "26379,h2:26379".
    store = open_store("redis+sentinel://127.0.0.1:26379,127.0.0.2:26379/mymaster")
    assert type(store).__name__ == "RedisStore"
    store.close()


def test_bad_table_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="plain SQL identifier"):
        SQLiteStore(str(tmp_path / "x.db"), table="t; DROP TABLE users")


def test_missing_driver_names_the_extra() -> None:
    with pytest.raises(ConfigurationError, match=r"pip install 'mideng\[redis\]'"):
        require("mideng_no_such_driver", "redis")


def test_register_store_adds_a_scheme() -> None:
    made: list[str] = []

    def factory(url: str) -> MemoryStore:
        made.append(url)
        return MemoryStore()

    register_store("mine", factory)
    assert isinstance(open_store("mine://x"), MemoryStore)
    assert made == ["mine://x"]


def test_dead_store_fails_closed_and_the_body_never_runs(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError):
        SQLiteStore(str(tmp_path / "missing-dir" / "x.db"))
    path = tmp_path / "x.db"
    store = SQLiteStore(str(path))
    guard = Guard(store)
    # Another process holds the write lock for longer than this store will wait.
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    fast = SQLiteStore(str(path), timeout=0.2)
    ran: list[int] = []
    with pytest.raises(StoreUnavailableError) as info:
        Guard(fast).run("pay", "t1", lambda: ran.append(1))
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    assert ran == []
    blocker.execute("ROLLBACK")
    blocker.close()
    assert guard.run("pay", "t1", lambda: "ok") == "ok"
    store.close()
    fast.close()
