"""SQLStore beyond the shared contract: statements per claim, the database clock, schema,
purge batches, timeouts, token atomicity and the debounce window, on PostgreSQL and MariaDB."""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pymysql  # type: ignore[import-untyped]
import pytest
from click.testing import CliRunner
from psycopg import Cursor
from psycopg import connect as psycopg_connect
from sqlalchemy.exc import TimeoutError as PoolTimeout

from mideng import Guard
from mideng.cli.schema import schema
from mideng.core.record import Claim, ClaimRequest, Outcome, Record, Status, Ticket
from mideng.errors import ConfigurationError, LeaseLostError, StoreUnavailableError
from mideng.stores.record_table.claims import ClaimOrder
from mideng.stores.record_table.statements import Statements as RecordStatements
from mideng.stores.registry import open_store
from mideng.stores.sql import SQLStore
from tests.backends_sql import drop_table, hold_row
from tests.services import MYSQL_URL, POSTGRES_URL, need

SERVERS = {"postgresql": POSTGRES_URL, "mysql": MYSQL_URL}


class Statements:
    """Every statement the store's own connections send, in order."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __len__(self) -> int:
        return len(self.seen)

    def kinds(self) -> list[str]:
        return [s.split()[0].upper() for s in self.seen]


SEEN = Statements()


class CountingCursor(Cursor[Any]):
    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        SEEN.seen.append(str(query))
        return super().execute(query, params, **kwargs)


class CountingMySQLCursor(pymysql.cursors.Cursor):  # type: ignore[misc]
    def execute(self, query: Any, args: Any = None) -> int:
        SEEN.seen.append(str(query))
        return int(super().execute(query, args))


def _counting(family: str) -> dict[str, Any]:
    if family == "postgresql":
        return {"cursor_factory": CountingCursor}
    return {"cursorclass": CountingMySQLCursor}


@pytest.fixture(params=list(SERVERS))
def family(request: pytest.FixtureRequest) -> str:
    need(request.param)
    return str(request.param)


@pytest.fixture
def table() -> Iterator[str]:
    name = f"mideng_s_{uuid.uuid4().hex[:10]}"
    yield name
    for url in SERVERS.values():
        try:
            drop_table(url, name)
        except Exception:
            continue


def _store(family: str, table: str, **options: Any) -> SQLStore:
    if family == "mysql8":  # MySQL 8's statements (no RETURNING), run on MariaDB
        return SQLStore.from_url(MYSQL_URL, table=table, returning=False, **options)
    return SQLStore.from_url(SERVERS[family], table=table, **options)


@pytest.fixture(params=[*SERVERS, "mysql8"])
def claim_family(request: pytest.FixtureRequest) -> str:
    """The databases, and MySQL 8's statements: every claim order runs on each."""
    need("mysql" if request.param == "mysql8" else request.param)
    return str(request.param)


@pytest.fixture(params=[None, True, False], ids=["learned", "read-first", "insert-first"])
def counted(
    request: pytest.FixtureRequest, claim_family: str, table: str
) -> Iterator[tuple[SQLStore, Statements]]:
    family = claim_family
    store = _store(family, table, connect_args=_counting(family), read_first=request.param)
    SEEN.seen.clear()
    yield store, SEEN
    store.close()


def req(key: str, owner: str | None = None, lease: float = 30.0) -> ClaimRequest:
    return ClaimRequest("pay", key, owner or uuid.uuid4().hex, lease, 3600.0)


# -- round trips --------------------------------------------------------------------------
def _reads_first(store: SQLStore) -> bool:
    return store.claim_order.fixed is True


def test_claim_statements(counted: tuple[SQLStore, Statements]) -> None:
    store, seen = counted
    first = store.claim(req("k"))
    assert first.outcome is Outcome.ACQUIRED
    # Reading first costs a new key a read before the insert; inserting first (what a store
    # that has seen nothing yet does) costs it the insert alone.
    assert seen.kinds() == (["SELECT", "INSERT"] if _reads_first(store) else ["INSERT"])

    seen.seen.clear()
    store.complete(Ticket.of(first.record), b'"done"', "json", 60)
    assert seen.kinds() == ["UPDATE"]  # the claim's own row is known: no read-back

    seen.seen.clear()
    again = store.claim(req("k"))
    assert again.outcome is Outcome.REPLAY
    # Read first, a duplicate is one plain read: no lock, no write. Insert first, the insert
    # finds the key taken and the read follows.
    assert seen.kinds() == (["SELECT"] if _reads_first(store) else ["INSERT", "SELECT"])


def test_take_over_is_a_read_and_one_compare_and_set(counted: tuple[SQLStore, Statements]) -> None:
    store, seen = counted
    store.claim(req("k", lease=0.2))
    time.sleep(0.3)  # let the lease run out
    seen.seen.clear()
    taken = store.claim(req("k"))
    assert taken.outcome is Outcome.ACQUIRED
    assert taken.record.fence == 2
    assert seen.kinds() == (
        ["SELECT", "UPDATE"] if _reads_first(store) else ["INSERT", "SELECT", "UPDATE"]
    )


def test_the_order_follows_what_each_scope_finds(claim_family: str, table: str) -> None:
    family = claim_family
    store = _store(family, table, connect_args=_counting(family))
    guard = Guard(store)
    SEEN.seen.clear()

    def statements(scope: str, key: str) -> list[str]:
        SEEN.seen.clear()
        guard.run(scope, key, lambda: {"n": 1})
        return SEEN.kinds()

    try:
        assert statements("pay", "order-1") == ["INSERT", "UPDATE"]  # new: insert, complete
        # A run of duplicates: each pays the insert that finds the key taken, until the scope
        # has learned; from then on a duplicate is one plain read.
        assert [statements("pay", "order-1") for _ in range(4)] == [["INSERT", "SELECT"]] * 3 + [
            ["SELECT"]
        ]
        # Another scope keeps its own habit.
        assert statements("refund", "r-1") == ["INSERT", "UPDATE"]
        # New keys again: each pays the read that finds nothing, until the scope relearns.
        runs = [statements("pay", f"order-{n}") for n in range(2, 6)]
        assert runs[0] == ["SELECT", "INSERT", "UPDATE"]
        assert runs[-1] == ["INSERT", "UPDATE"]
    finally:
        store.close()


def test_settled_rows_need_no_read_back(family: str, table: str) -> None:
    """complete/fail/heartbeat answer with the new row without reading it; it must be the row
    the database holds, to the last bit of every timestamp."""
    store = _store(family, table)
    try:
        a = store.claim(req("a")).record
        beat = store.heartbeat(Ticket.of(a), 90, 3600)
        assert beat == store.get("pay", "a")
        assert store.complete(Ticket.of(a), b'{"x":1}', "json", 60) == store.get("pay", "a")
        b = store.claim(req("b")).record
        assert store.fail(Ticket.of(b), b'{"type":"x"}', None) == store.get("pay", "b")
        # A ticket this store never handed out (another process's) is answered by a read.
        c = store.claim(req("c")).record
        other = _store(family, table, create_schema=False)
        try:
            assert other.complete(Ticket.of(c), b"1", "json", 60) == store.get("pay", "c")
        finally:
            other.close()
    finally:
        store.close()


def test_mysql8_statements_on_mariadb(table: str) -> None:
    need("mysql")
    store = SQLStore.from_url(MYSQL_URL, table=table, returning=False)
    try:
        guard = Guard(store)
        runs: list[int] = []

        def body() -> int:
            runs.append(1)
            return len(runs)

        assert guard.run("pay", "k", body) == 1
        assert guard.run("pay", "k", body) == 1
        assert runs == [1]
        first = store.claim(req("lapse", lease=0.2))
        time.sleep(0.3)
        taken = store.claim(req("lapse"))
        assert (taken.outcome, taken.record.fence) == (Outcome.ACQUIRED, 2)
        with pytest.raises(LeaseLostError):
            store.complete(Ticket.of(first.record), b"1", "json", 60)
    finally:
        store.close()


# -- the database clock -------------------------------------------------------------------
def test_claimed_and_read_rows_decode_exactly(family: str, table: str) -> None:
    # MySQL's rows come back packed into two columns; every field must survive that exactly,
    # bytes with the separators in them, NULLs, unicode and full-precision times included.
    store = _store(family, table)
    owner = "o,wn\u00e9r"
    claim = store.claim(
        ClaimRequest("s,c:ope", "k,e\ny\u4e2d", owner, 30.0, 60.0, "fp,1", request_id="r,\u00e9")
    )
    ticket = Ticket.of(claim.record)
    done = store.complete(ticket, b"\x00,1,2\n-\xff", "json", 60.0)
    got = store.get("s,c:ope", "k,e\ny\u4e2d")
    assert got == done
    assert got is not None
    assert (got.owner, got.fingerprint, got.request_id) == (owner, "fp,1", "r,\u00e9")
    assert (got.result, got.error, got.lease_until) == (b"\x00,1,2\n-\xff", None, None)
    again = store.claim(ClaimRequest("s,c:ope", "k,e\ny\u4e2d", "o2", 30.0, 60.0, "fp,1"))
    assert again.outcome is Outcome.REPLAY
    assert again.record == done
    with store.engine.connect() as conn:
        plain = conn.exec_driver_sql(
            f"SELECT created_at, updated_at, expires_at FROM {table}"
        ).one()
    assert (got.created_at, got.updated_at, got.expires_at) == tuple(plain)
    store.close()


def test_times_come_from_the_database_clock(
    family: str, table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(family, table)
    try:
        with store.engine.connect() as conn:
            sql = (
                "SELECT date_part('epoch', clock_timestamp())"
                if family == "postgresql"
                else "SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) / 1e6"
            )
            db_before = float(conn.exec_driver_sql(sql).scalar_one())
        # A client clock a day off must change nothing the store writes or decides.
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 86400)
        record = store.claim(req("k", lease=30)).record
        monkeypatch.undo()
        with store.engine.connect() as conn:
            db_after = float(conn.exec_driver_sql(sql).scalar_one())
        assert db_before - 1 <= record.created_at <= db_after + 1
        assert record.lease_until == pytest.approx(record.created_at + 30)
        assert store.get("pay", "k") == record
    finally:
        store.close()


# -- schema -------------------------------------------------------------------------------
def test_schema_is_idempotent_and_printable(family: str, table: str) -> None:
    store = _store(family, table)
    try:
        store.create_schema()  # second time: nothing to do, no error
        ddl = store.schema_sql()
        assert f"CREATE TABLE IF NOT EXISTS {table}" in ddl
        assert f"{table}_expires" in ddl
        assert f"{table}_open" in ddl
        printed = CliRunner().invoke(schema, ["--url", SERVERS[family], "--table", table])
        assert printed.exit_code == 0, printed.output
        assert printed.output == ddl
    finally:
        store.close()


def test_schema_command_applies_and_knows_sqlite(table: str, tmp_path: Any) -> None:
    need("postgresql")
    applied = CliRunner().invoke(schema, ["--url", POSTGRES_URL, "--table", table, "--apply"])
    assert applied.exit_code == 0, applied.output
    store = SQLStore.from_url(POSTGRES_URL, table=table, create_schema=False)
    try:
        assert store.claim(req("k")).acquired  # the table is there
    finally:
        store.close()
    lite = CliRunner().invoke(schema, ["--url", f"sqlite:///{tmp_path}/x.db", "--apply"])
    assert lite.exit_code == 0, lite.output
    assert "WITHOUT ROWID" in lite.output
    assert (tmp_path / "x.db").exists()
    bad = CliRunner().invoke(schema, ["--url", "redis://localhost"])
    assert bad.exit_code != 0


def test_table_names_and_options_are_checked() -> None:
    with pytest.raises(ConfigurationError):
        SQLStore(POSTGRES_URL, table="records; DROP TABLE x", create_schema=False)
    with pytest.raises(ConfigurationError):
        SQLStore(POSTGRES_URL, statement_timeout=0, create_schema=False)
    with pytest.raises(ConfigurationError):
        SQLStore("oracle://x/y", create_schema=False)
    store = SQLStore.from_url(
        POSTGRES_URL + "?table=t_from_url&pool_size=3&statement_timeout=2&create_schema=false"
    )
    assert store.table == "t_from_url"
    assert store.config.engine_options["pool_size"] == 3
    assert store.config.statement_timeout == 2.0
    store.close()


def test_a_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(ConfigurationError, match=r"mideng\[postgresql\]"):
        SQLStore(POSTGRES_URL, create_schema=False)


def test_open_store_normalises_schemes() -> None:
    expected = {
        "postgresql://u@h/db": "postgresql+psycopg",
        "postgres://u@h/db": "postgresql+psycopg",
        "mysql://u@h/db": "mysql+pymysql",
        "mariadb+pymysql://u@h/db": "mysql+pymysql",
    }
    for url, driver in expected.items():
        store = open_store(url, create_schema=False)
        assert isinstance(store, SQLStore)
        assert store.config.sqlalchemy_url().drivername == driver
        store.close()
    assert (
        SQLStore("mysql://u@h/db", create_schema=False)
        .config.sqlalchemy_url(asynchronous=True)
        .drivername
        == "mysql+asyncmy"
    )


# -- purge ----------------------------------------------------------------------------------
def test_purge_deletes_expired_rows_in_batches(family: str, table: str) -> None:
    store = _store(family, table, purge_batch=10, connect_args=_counting(family))
    try:
        for i in range(25):
            t = store.claim(ClaimRequest("pay", f"old{i}", uuid.uuid4().hex, 30, 0.05)).record
            store.complete(Ticket.of(t), b"1", "json", 0.05)
        for i in range(3):
            t = store.claim(req(f"live{i}")).record
            store.complete(Ticket.of(t), b"1", "json", 3600)
        time.sleep(0.2)  # the short retention runs out
        assert store.purge(limit=7) == 7
        SEEN.seen.clear()
        assert store.purge() == 18
        # 10, then 8 (< a batch: done); PostgreSQL's batch is a WITH that answers its counts,
        # MySQL's reads the batch's keys from the expiry index, then deletes their range.
        batch = ["WITH"] if family == "postgresql" else ["SELECT", "DELETE"]
        assert SEEN.kinds() == batch * 2
        assert store.purge() == 0
        assert all(store.get("pay", f"live{i}") is not None for i in range(3))
    finally:
        store.close()


def test_a_postgresql_purge_follows_the_expiry_index_wherever_the_rows_sit(table: str) -> None:
    """Expired rows all at the end of the heap: a batch chosen by a scan with LIMIT would read
    the whole live part of the table first, each batch again."""
    need("postgresql")
    store = _store("postgresql", table)
    try:
        with psycopg_connect(POSTGRES_URL.replace("+psycopg", ""), autocommit=True) as conn:
            conn.execute(
                f"INSERT INTO {table} (scope, key, status, fence, owner, created_at, "
                "updated_at, expires_at) SELECT 's', 'k' || g, 'succeeded', 1, 'o', 0, 0, "
                "CASE WHEN g > 15000 THEN 1.0 ELSE 4e9 END FROM generate_series(1, 20000) g"
            )
            conn.execute(f"ANALYZE {table}")
            text = RecordStatements("postgresql", table).purge.text.replace(":at", "-1e300")
            (plan,) = conn.execute(f"EXPLAIN (FORMAT JSON) {text.replace(':batch', '1000')}")
        scans = list(_scans(plan[0][0]["Plan"]))
        assert any(node.startswith("Index") for node, _ in scans), scans
        assert ("Seq Scan", table) not in scans, scans
        assert store.purge(limit=2500) == 2500
        # The next purge resumes at the last expiry chosen (the index holds no key).
        assert store.sweep.after == (1.0, "", "")
        assert store.purge() == 2500
        assert store.sweep.after is None  # done: the next begins at the start
    finally:
        store.close()


def _scans(node: dict[str, Any]) -> Iterator[tuple[str, str | None]]:
    if "Scan" in node["Node Type"]:
        yield node["Node Type"], node.get("Relation Name")
    for child in node.get("Plans", ()):
        yield from _scans(child)


def test_unresolved_lists_stuck_and_unknown_records(family: str, table: str) -> None:
    store = _store(family, table)
    try:
        store.claim(req("stuck", lease=0.1))
        store.claim(req("live"))
        done = store.claim(req("done")).record
        store.complete(Ticket.of(done), b"1", "json", 60)
        time.sleep(0.2)
        assert [r.key for r in store.unresolved()] == ["stuck"]
        assert store.unresolved(scope="other") == []
    finally:
        store.close()


# -- failing fast -------------------------------------------------------------------------
def test_a_hung_statement_fails_fast_as_store_unavailable(family: str, table: str) -> None:
    store = _store(family, table, statement_timeout=0.5)
    holder, conn, trans = hold_row(SERVERS[family], table, "locked")
    try:
        with pytest.raises(StoreUnavailableError) as caught:
            store.claim(req("locked"))
        assert caught.value.__cause__ is not None  # the driver's error, chained
        assert store.claim(req("free")).acquired  # the store itself is fine afterwards
    finally:
        trans.rollback()
        conn.close()
        holder.dispose()
        store.close()


def test_an_unreachable_server_is_store_unavailable() -> None:
    url = "postgresql://postgres@127.0.0.1:1/test"
    with pytest.raises(StoreUnavailableError) as caught:
        SQLStore(url, connect_timeout=1)
    assert caught.value.__cause__ is not None


def test_an_exhausted_pool_is_store_unavailable(family: str, table: str) -> None:
    _store(family, table).close()  # the table, made by another store
    store = _store(
        family, table, pool_size=1, max_overflow=0, pool_timeout=0.2, create_schema=False
    )
    try:
        taken = store.engine.raw_connection()
        with pytest.raises(StoreUnavailableError):
            store.get("pay", "k")
        taken.close()
        assert store.get("pay", "k") is None
        # The store keeps the connection between operations, and it still counts: the pool
        # has nothing left to give anyone else.
        with pytest.raises(PoolTimeout):
            store.engine.raw_connection()
    finally:
        store.close()


def test_kept_connections_stay_within_the_pool(family: str, table: str) -> None:
    store = _store(family, table, pool_size=2, max_overflow=3, pool_timeout=5)
    guard = Guard(store)
    barrier = threading.Barrier(5)

    def burst(n: int) -> None:
        barrier.wait()
        for i in range(20):
            guard.run("pay", f"burst-{n}-{i}", lambda: n)

    threads = [threading.Thread(target=burst, args=(n,)) for n in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Overflow connections went back to the pool to be closed; the store keeps pool_size.
    assert len(store.executor.cache.free) <= 2
    assert (
        store.engine.pool.checkedout()
        == len(store.executor.cache.free)
        == store.executor.cache.owned
    )
    store.close()


# -- the learned claim order (pure) -------------------------------------------------------
def _claim(fence: int, outcome: Outcome = Outcome.ACQUIRED) -> Claim:
    record = Record(
        "pay",
        "k",
        Status.PROCESSING,
        fence,
        "o",
        None,
        1.0,
        None,
        None,
        None,
        fence,
        None,
        0.0,
        0.0,
        None,
    )
    return Claim(outcome, record)


def test_habit_learns_each_scope_and_forgets_past_its_bound() -> None:
    habit = ClaimOrder()
    assert not habit.read_first("pay")  # nothing seen: new keys are the usual case
    for outcome, fence in [(Outcome.REPLAY, 1), (Outcome.IN_PROGRESS, 1)]:
        habit.saw("pay", _claim(fence, outcome))
    assert not habit.read_first("pay")
    habit.saw("pay", _claim(2))  # a take-over found the key taken too
    assert habit.read_first("pay")
    assert not habit.read_first("refund")
    for _ in range(3):
        habit.saw("pay", _claim(1))  # fresh rows
    assert not habit.read_first("pay")

    for _ in range(60):  # a long run of one kind settles exactly, and is then left as it is
        habit.saw("pay", _claim(1, Outcome.REPLAY))
    assert habit.shares["pay"] == 1.0
    habit.saw("pay", _claim(1))
    assert habit.shares["pay"] == 0.75
    assert habit.read_first("pay")

    habit = ClaimOrder()
    for n in range(ClaimOrder.SCOPES):
        for _ in range(3):
            habit.saw(f"s{n}", _claim(1, Outcome.REPLAY))
    assert habit.read_first("s0")
    habit.saw("one-too-many", _claim(1, Outcome.REPLAY))  # the memory starts over
    assert not habit.read_first("s0")
    assert len(habit.shares) == 1


def test_a_pinned_habit_never_moves() -> None:
    for fixed in (True, False):
        habit = ClaimOrder(fixed)
        for _ in range(10):
            habit.saw("pay", _claim(1, Outcome.REPLAY if fixed else Outcome.ACQUIRED))
        assert habit.read_first("pay") is fixed
        assert habit.read_first("other") is fixed
