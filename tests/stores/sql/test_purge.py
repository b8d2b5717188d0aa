"""Purges on PostgreSQL and MariaDB read a bounded number of rows per row they delete, however
many calls a purge takes (``mideng purge`` calls ``purge(1000)`` again and again), and a claim
is not held up by a purge batch that has its transaction open.

Rows read are the database's own counters for the statements the sweep sent, on the one
connection it ran on: PostgreSQL's ``pg_stat_xact_user_tables`` (this transaction's
sequential and index reads of the heap), MariaDB's session ``Handler_read_*`` (every row the
server asked the storage engine for)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, Engine

from mideng.core.record import ClaimRequest, Outcome
from mideng.db.caller_connection import execute_for
from mideng.db.drive import drive
from mideng.db.statements import Op, Res, Stmt
from mideng.stores.record_table.ops import Place, Sweep, purge
from mideng.stores.record_table.statements import Statements
from mideng.stores.record_table.survey import purge_older
from mideng.stores.sql import SQLStore
from tests.backends_sql import drop_table
from tests.services import MYSQL_URL, POSTGRES_URL, need

SERVERS = {"postgresql": POSTGRES_URL, "mariadb": MYSQL_URL}
ROWS = 6000
BATCH = 100
THIRD = ROWS // 3


@pytest.fixture(params=list(SERVERS))
def kind(request: pytest.FixtureRequest) -> str:
    need("mysql" if request.param == "mariadb" else request.param)
    return str(request.param)


@pytest.fixture
def table(kind: str) -> Iterator[str]:
    name = f"mideng_p_{uuid.uuid4().hex[:10]}"
    SQLStore.from_url(SERVERS[kind], table=name).close()  # the table and its indexes
    yield name
    drop_table(SERVERS[kind], name)
    drop_table(SERVERS[kind], f"{name}_steps")


@pytest.fixture
def engine(kind: str) -> Iterator[Engine]:
    made = create_engine(
        SQLStore.from_url(SERVERS[kind], create_schema=False).config.sqlalchemy_url()
    )
    yield made
    made.dispose()


def fill(conn: Connection, kind: str, table: str) -> None:
    """ROWS finished rows, key order k000000…: one in three expired (i % 3 == 0), their
    expiries in the reverse of their keys' order; one in three last written long ago and kept
    for an hour more (i % 3 == 1); the rest recent and live."""
    i = "g" if kind == "postgresql" else "seq"
    expiry = f"CASE WHEN {i} % 3 = 0 THEN 1000 + {ROWS} - {i} ELSE 4e9 + {i} END"
    written = f"CASE WHEN {i} % 3 = 1 THEN 0 ELSE 4e9 END"
    if kind == "postgresql":
        key, rows = f"'k' || lpad({i}::text, 6, '0')", f"generate_series(0, {ROWS - 1}) {i}"
    else:
        key, rows = f"concat('k', lpad({i}, 6, '0'))", f"seq_0_to_{ROWS - 1}"
    k = "`key`" if kind == "mariadb" else "key"
    conn.execute(
        text(
            f"INSERT INTO {table} (scope, {k}, status, fence, owner, created_at, updated_at, "
            f"expires_at) SELECT 's', {key}, 'succeeded', 1, 'o', 0, {written}, {expiry} "
            f"FROM {rows}"
        )
    )
    conn.execute(text(f"ANALYZE {'' if kind == 'postgresql' else 'TABLE '}{table}"))


def rows_read(conn: Connection, kind: str, table: str) -> int:
    """Rows the server has read for this connection so far (see the module's docstring)."""
    if kind == "postgresql":
        return int(
            conn.execute(
                text(
                    "SELECT seq_tup_read + coalesce(idx_tup_fetch, 0) "
                    "FROM pg_stat_xact_user_tables WHERE relname = :t"
                ),
                {"t": table},
            ).scalar_one()
        )
    found = conn.execute(text("SHOW SESSION STATUS LIKE 'Handler_read%'")).all()
    return sum(int(n) for _, n in found)


def left(conn: Connection, table: str) -> tuple[int, int]:
    """(expired rows, old finished rows) still in the table."""
    expired = conn.execute(text(f"SELECT count(*) FROM {table} WHERE expires_at < 1e9"))
    old = conn.execute(text(f"SELECT count(*) FROM {table} WHERE updated_at = 0"))
    return int(expired.scalar_one()), int(old.scalar_one())


def swept(
    conn: Connection, kind: str, table: str, sweep_of: Callable[[], Op[int]]
) -> tuple[int, int, int]:
    """Run a limited purge again and again until it comes back short, as ``mideng purge``
    does, on ``conn``: (rows deleted, calls, rows the server read for them)."""
    before = rows_read(conn, kind, table)
    calls = deleted = 0
    while True:
        done = drive(sweep_of(), execute_for(kind), conn)
        calls, deleted = calls + 1, deleted + done
        if done < BATCH:
            break
    return deleted, calls, rows_read(conn, kind, table) - before


def test_a_purge_reads_a_bounded_number_of_rows_per_row_it_deletes(
    kind: str, table: str, engine: Engine
) -> None:
    s, sweep = Statements(kind, table), Sweep[Place]()
    with engine.begin() as conn:  # one transaction: PostgreSQL counts it in pg_stat_xact
        fill(conn, kind, table)
    with engine.begin() as conn:
        deleted, calls, read = swept(conn, kind, table, lambda: purge(s, BATCH, BATCH, sweep))
        assert left(conn, table) == (0, THIRD)
    assert (deleted, calls) == (THIRD, THIRD // BATCH + 1)
    # Each batch reads its keys from the expiry index and deletes them: two reads a row and
    # a few a batch. Starting every batch at the index's start would read ~calls * THIRD / 2.
    assert read <= 2 * deleted + 8 * calls, read


def test_a_purge_older_reads_each_row_once_however_many_calls_it_takes(
    kind: str, table: str, engine: Engine
) -> None:
    s, sweep = Statements(kind, table), Sweep[tuple[str, str]]()
    with engine.begin() as conn:
        fill(conn, kind, table)
    with engine.begin() as conn:
        deleted, calls, read = swept(
            conn, kind, table, lambda: purge_older(s, 60.0, BATCH, sweep, BATCH)
        )
        assert left(conn, table) == (THIRD, 0)
    assert (deleted, calls) == (THIRD, THIRD // BATCH + 1)
    # No index holds updated_at, so the walk reads the table's keys, each once, each range
    # again to choose from it, and the chosen once more to delete them: under 3 * ROWS. A
    # DELETE … LIMIT that scans from the start every call reads the rows all earlier calls
    # kept, again: ~calls * ROWS / 2 (~60,000).
    assert read <= 3 * ROWS + 8 * calls, read


class Paused:
    """Runs each statement of a purge in its own transaction, as the store does, and holds
    the first DELETE's transaction open until ``go`` is set."""

    def __init__(self, kind: str) -> None:
        self.execute = execute_for(kind)
        self.holding, self.go = threading.Event(), threading.Event()
        self.error: BaseException | None = None

    def __call__(self, conn: Connection, stmt: Stmt) -> Res:
        with conn.begin():
            res = self.execute(conn, stmt)
            deletes = "DELETE " in stmt.sql.text
            if deletes and not self.holding.is_set():
                self.holding.set()
                self.go.wait()
        return res

    def run(self, engine: Engine, op: Op[int]) -> threading.Thread:
        def purging() -> None:
            try:
                with engine.connect() as conn:
                    drive(op, self, conn)
            except BaseException as exc:  # the assertion below reports it
                self.error = exc
            finally:
                self.holding.set()

        thread = threading.Thread(target=purging)
        thread.start()
        assert self.holding.wait(60)
        return thread


@pytest.mark.parametrize("older", [False, True], ids=["expired", "older-than"])
def test_a_claim_is_not_held_up_by_a_purge_batch_holding_its_transaction_open(
    kind: str, table: str, engine: Engine, older: bool
) -> None:
    with engine.begin() as conn:
        fill(conn, kind, table)
    s = Statements(kind, table)
    op = (
        purge_older(s, 60.0, None, Sweep(), BATCH)
        if older
        else purge(s, None, BATCH, Sweep[Place]())
    )
    paused = Paused(kind)
    thread = paused.run(engine, op)
    # A claim that waited on the batch's locks would wait until the purge went on, which
    # it does only after these: the statement timeout turns such a wait into a failure.
    store = SQLStore.from_url(SERVERS[kind], table=table, statement_timeout=5)
    try:
        # A new key, and rows later batches will delete (an expired one, an old one) and
        # one they keep: none is in the first batch's range, of the expiry index or the key.
        for key, outcome in [
            ("new", Outcome.ACQUIRED),
            ("k001500", Outcome.ACQUIRED),  # expired: taken over
            ("k004500", Outcome.ACQUIRED),
            ("k004501", Outcome.REPLAY),  # old but live
            ("k004502", Outcome.REPLAY),
        ]:
            got = store.claim(ClaimRequest("s", key, uuid.uuid4().hex, 30, 3600))
            assert got.outcome is outcome, key
        assert thread.is_alive()  # the purge is still held in its first batch
    finally:
        paused.go.set()
        thread.join()
        store.close()
    assert paused.error is None, paused.error
