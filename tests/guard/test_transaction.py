"""Transactional mode on PostgreSQL, MariaDB and SQLite, sync and async: the record and the
business writes commit together or not at all; duplicates wait for the first to commit and
replay; a duplicate never breaks the caller's transaction."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, create_engine, event, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from mideng import Guard, open_store
from mideng.core.record import ClaimRequest, Status, Ticket
from mideng.errors import (
    ConfigurationError,
    InProgressError,
    LeaseLostError,
    PayloadMismatchError,
    UnresolvedError,
)
from mideng.stores.sql import SQLStore
from mideng.stores.sqlite import SQLiteStore
from tests.services import MYSQL_URL, POSTGRES_URL, need

pytestmark = pytest.mark.slow


@dataclass
class Db:
    name: str
    url: str  # sync SQLAlchemy URL
    aurl: str  # async SQLAlchemy URL
    store_url: str
    table: str
    orders: str
    engine: Engine
    guard: Guard
    engines: list[Any] = field(default_factory=list)

    def orders_for(self, key: str) -> list[tuple[Any, ...]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                text(f"SELECT id, amount FROM {self.orders} WHERE order_key = :k"), {"k": key}
            )
            return [tuple(r) for r in rows]


def _urls(name: str, tmp: Path) -> tuple[str, str, str]:
    if name == "postgresql":
        return POSTGRES_URL, POSTGRES_URL, POSTGRES_URL
    if name == "mysql":
        return MYSQL_URL, MYSQL_URL.replace("+pymysql", "+asyncmy"), MYSQL_URL
    path = tmp / "tx.db"
    return f"sqlite:///{path}", f"sqlite+aiosqlite:///{path}", f"sqlite:///{path}"


@pytest.fixture(params=["postgresql", "mysql", "sqlite"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    name = str(request.param)
    if name != "sqlite":
        need(name)
    url, aurl, store_url = _urls(name, tmp_path)
    suffix = uuid.uuid4().hex[:10]
    table, orders = f"mideng_tx_{suffix}", f"orders_{suffix}"
    store = open_store(store_url, table=table)
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text(
                f"CREATE TABLE {orders} (id VARCHAR(64) PRIMARY KEY, "
                f"order_key VARCHAR(64) NOT NULL, amount INTEGER NOT NULL)"
            )
        )
    db = Db(name, url, aurl, store_url, table, orders, engine, Guard(store, lease=30))
    yield db
    store.close()
    if name != "sqlite":
        with engine.begin() as conn:
            conn.execute(text(f"DROP TABLE {orders}"))
            conn.execute(text(f"DROP TABLE {table}"))
    engine.dispose()


def never() -> Any:
    raise AssertionError("the body must not run")


def pay(conn: Connection | Session, db: Db, key: str, amount: int) -> dict[str, Any]:
    order = uuid.uuid4().hex
    conn.execute(
        text(f"INSERT INTO {db.orders} (id, order_key, amount) VALUES (:i, :k, :a)"),
        {"i": order, "k": key, "a": amount},
    )
    return {"order": order, "amount": amount}


def charge(db: Db, key: str, amount: int = 10, fail: bool = False) -> tuple[bool, Any]:
    with (
        db.engine.connect() as conn,
        db.guard.transaction(conn, "pay", key, payload={"amount": amount}) as tx,
    ):
        if tx.replayed:
            return True, tx.result
        result = pay(conn, db, key, amount)
        if fail:
            raise RuntimeError("declined")
        tx.set_result(result)
    return False, result


# -- commit and roll back together --------------------------------------------------------
def test_business_write_and_record_commit_together(db: Db) -> None:
    with db.engine.connect() as conn:
        with db.guard.transaction(conn, "pay", "o-1", payload={"amount": 10}) as tx:
            assert not tx.replayed
            result = pay(conn, db, "o-1", 10)
            tx.set_result(result)
            # Nothing is visible to anyone else until the block commits.
            assert db.guard.get("pay", "o-1") is None
        record = db.guard.get("pay", "o-1")
        assert record is not None
        assert record.status is Status.SUCCEEDED
    assert len(db.orders_for("o-1")) == 1
    assert charge(db, "o-1") == (True, result)
    assert len(db.orders_for("o-1")) == 1


def test_an_exception_rolls_back_both_and_frees_the_key(db: Db) -> None:
    with pytest.raises(RuntimeError, match="declined"):
        charge(db, "o-2", fail=True)
    assert db.orders_for("o-2") == []
    assert db.guard.get("pay", "o-2") is None
    replayed, result = charge(db, "o-2")  # the retry runs
    assert not replayed
    assert db.orders_for("o-2") == [(result["order"], 10)]


def test_leaving_without_a_result_stores_none(db: Db) -> None:
    with db.engine.connect() as conn, db.guard.transaction(conn, "pay", "o-3") as tx:
        pay(conn, db, "o-3", 1)
    with db.engine.connect() as conn, db.guard.transaction(conn, "pay", "o-3") as tx:
        assert tx.replayed
        assert tx.result is None
        with pytest.raises(ConfigurationError):
            tx.set_result(1)


# -- the caller's own transaction ---------------------------------------------------------
def block(db: Db, conn: Connection, key: str, savepoint: bool) -> None:
    with db.guard.transaction(conn, "pay", key, savepoint=savepoint):
        pay(conn, db, key, 1)
        raise RuntimeError("declined")


def test_in_the_callers_transaction_the_caller_commits(db: Db) -> None:
    with db.engine.begin() as conn:
        pay(conn, db, "before", 1)
        with db.guard.transaction(conn, "pay", "o-4") as tx:
            tx.set_result(pay(conn, db, "o-4", 4))
        assert db.guard.get("pay", "o-4") is None  # not committed yet: the caller's call
    assert db.guard.get("pay", "o-4") is not None
    assert len(db.orders_for("before")) == 1
    assert len(db.orders_for("o-4")) == 1


def test_an_exception_in_a_savepoint_undoes_only_the_block(db: Db) -> None:
    with db.engine.connect() as conn:
        conn.begin()
        pay(conn, db, "before", 1)
        with pytest.raises(RuntimeError, match="declined"):
            block(db, conn, "o-5", savepoint=True)
        assert conn.execute(text("SELECT 1")).scalar() == 1  # still usable
        conn.commit()
    assert len(db.orders_for("before")) == 1
    assert db.orders_for("o-5") == []
    assert db.guard.get("pay", "o-5") is None


def test_without_a_savepoint_an_exception_rolls_back_the_callers_transaction(db: Db) -> None:
    with db.engine.connect() as conn:
        conn.begin()
        pay(conn, db, "before", 1)
        with pytest.raises(RuntimeError, match="declined"):
            block(db, conn, "o-6", savepoint=False)
        assert not conn.in_transaction()
        conn.commit()
    assert db.orders_for("before") == []
    assert db.orders_for("o-6") == []
    assert db.guard.get("pay", "o-6") is None


def test_a_duplicate_never_aborts_the_callers_transaction(db: Db) -> None:
    """The Camel JDBC idempotent repository bug (CAMEL-24048): a duplicate insert failed on the
    unique key and left the caller's transaction aborted. Here the caller goes on."""
    _, first = charge(db, "o-7", 7)
    with db.engine.connect() as conn:
        conn.begin()
        pay(conn, db, "before", 1)
        with db.guard.transaction(conn, "pay", "o-7", payload={"amount": 7}, savepoint=False) as tx:
            assert tx.replayed
            assert tx.result == first
        with (
            pytest.raises(PayloadMismatchError),
            db.guard.transaction(conn, "pay", "o-7", payload={"amount": 8}, savepoint=False),
        ):
            pytest.fail("a mismatched payload must not run")
        assert conn.execute(text(f"SELECT count(*) FROM {db.orders}")).scalar() == 2
        conn.commit()
    assert len(db.orders_for("before")) == 1
    assert len(db.orders_for("o-7")) == 1


def test_a_duplicate_in_a_transaction_is_one_statement(db: Db) -> None:
    charge(db, "o-8")
    seen: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        with db.engine.connect() as conn:
            conn.begin()
            with db.guard.transaction(
                conn, "pay", "o-8", payload={"amount": 10}, savepoint=False
            ) as tx:
                assert tx.replayed
            conn.commit()
    finally:
        event.remove(db.engine, "before_cursor_execute", count)
    assert [s.split()[0] for s in seen] == ["SELECT"], seen  # a plain read, no lock


def test_an_orm_session_works_as_the_connection(db: Db) -> None:
    with Session(db.engine) as session:
        with db.guard.transaction(session, "pay", "o-9") as tx:
            tx.set_result(pay(session, db, "o-9", 9))
        assert not session.in_transaction()  # the block began it, so it committed it
    with (
        Session(db.engine) as session,
        session.begin(),
        db.guard.transaction(session, "pay", "o-9") as tx,
    ):
        assert tx.replayed
    assert len(db.orders_for("o-9")) == 1


def test_wrong_connection_types_are_refused(db: Db) -> None:
    with pytest.raises(ConfigurationError), db.guard.transaction(object(), "pay", "k"):
        pytest.fail("must not run")
    guard = Guard("memory://")
    with (
        db.engine.connect() as conn,
        pytest.raises(ConfigurationError, match="table"),
        guard.transaction(conn, "pay", "k"),
    ):
        pytest.fail("must not run")


# -- with Guard.run records on the same table ---------------------------------------------
def test_a_live_guard_run_claim_is_in_progress(db: Db) -> None:
    store = db.guard.store
    holder = store.claim(ClaimRequest("pay", "o-10", uuid.uuid4().hex, 30, 3600))
    with db.engine.connect() as conn:
        conn.begin()
        conn.execute(text("SELECT 1"))
        with pytest.raises(InProgressError), db.guard.transaction(conn, "pay", "o-10"):
            pytest.fail("must not run")
        assert conn.execute(text("SELECT 1")).scalar() == 1
        # The refusal holds nothing: the holder completes while this transaction is open.
        store.complete(Ticket.of(holder.record), b'{"by":"run"}', "json", 3600)
        conn.rollback()
    assert charge(db, "o-10") == (True, {"by": "run"})


def test_a_replay_in_an_open_transaction_blocks_nobody(db: Db) -> None:
    _, first = charge(db, "o-14")
    with db.engine.connect() as conn:
        conn.begin()
        conn.execute(text("SELECT 1"))
        with db.guard.transaction(conn, "pay", "o-14", payload={"amount": 10}) as tx:
            assert tx.replayed
        # Still inside that transaction: other callers of the key replay at once.
        assert db.guard.run("pay", "o-14", never, payload={"amount": 10}) == first
        assert charge(db, "o-14") == (True, first)
        conn.commit()


def test_a_lapsed_guard_run_claim_is_taken_over(db: Db) -> None:
    store = db.guard.store
    zombie = store.claim(ClaimRequest("pay", "o-11", uuid.uuid4().hex, 0.2, 3600)).record
    time.sleep(0.3)  # the holder's lease runs out
    replayed, result = charge(db, "o-11")
    assert not replayed
    record = db.guard.get("pay", "o-11")
    assert record is not None
    assert (record.status, record.fence) == (Status.SUCCEEDED, 2)
    with pytest.raises(LeaseLostError):
        store.complete(Ticket.of(zombie), b'"late"', "json", 60)
    assert charge(db, "o-11") == (True, result)


def test_an_unknown_scope_refuses_after_a_lapse(db: Db) -> None:
    store = db.guard.store
    store.claim(ClaimRequest("charge", "c-1", uuid.uuid4().hex, 0.2, None, on_expiry="unknown"))  # type: ignore[arg-type]
    time.sleep(0.3)
    with (
        db.engine.connect() as conn,
        pytest.raises(UnresolvedError),
        db.guard.transaction(conn, "charge", "c-1", on_expiry="unknown"),
    ):
        pytest.fail("must not run")


def test_guard_run_replays_a_transactional_record(db: Db) -> None:
    _, result = charge(db, "o-12")
    assert db.guard.run("pay", "o-12", never, payload={"amount": 10}) == result


def test_the_guard_store_table_is_the_default(db: Db) -> None:
    store = db.guard.store
    assert isinstance(store, (SQLStore, SQLiteStore))
    other = Guard("memory://")
    with db.engine.connect() as conn, other.transaction(conn, "pay", "o-13", table=db.table) as tx:
        tx.set_result(13)
    assert db.guard.get("pay", "o-13") is not None
