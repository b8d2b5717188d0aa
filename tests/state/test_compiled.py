"""Which statements are sent as the dialect's own SQL and which through SQLAlchemy's typed
``text()`` (mideng.state.compiled), and that both give the same answers on a real database."""

from __future__ import annotations

import asyncio
import uuid
from decimal import Decimal
from typing import Any

from sqlalchemy import Column, Integer, MetaData, Numeric, String, Table, create_engine, event
from sqlalchemy import Enum as SQLEnum
from sqlalchemy.dialects.mysql import pymysql
from sqlalchemy.dialects.postgresql import asyncpg, psycopg
from sqlalchemy.dialects.sqlite import pysqlite
from sqlalchemy.engine.interfaces import BindTyping
from sqlalchemy.ext.asyncio import create_async_engine

from bench.business import business_tables
from mideng.db.drive import drive
from mideng.state import (
    AlreadyThere,
    Applied,
    Conflict,
    Existing,
    Inserted,
    Insufficient,
    StateMachine,
    adecrement,
    aupdate_versioned,
    decrement,
    insert_once,
)
from mideng.state.compiled import TableSql, speech
from mideng.state.ops import insert_once as insert_once_op
from mideng.state.primitives import _decrement_shape
from mideng.state.run import execute
from mideng.state.statements import UpdateOf, insert_shape
from tests.services import MYSQL_URL, POSTGRES_URL, need
from tests.state.conftest import new_key
from tests.state.sides import Db

metadata = MetaData()
STOCK = Table(
    "stock_compiled",
    metadata,
    Column("sku", String(40), primary_key=True),
    Column("qty", Integer, nullable=False),
    Column("weight", Numeric(10, 2)),
    Column("grade", SQLEnum("A", "B", name="grade", native_enum=False)),
)
# A Python-side onupdate: computed by the primitive on every call, bound as ``u0``.
TOUCHED = Table(
    "touched_compiled",
    metadata,
    Column("sku", String(40), primary_key=True),
    Column("qty", Integer, nullable=False),
    Column("touched", Integer, onupdate=lambda: 1),
)
WHERE = {"w0": "sku-1", "n": 3}


def _shape(dialect: Any, column: str = "qty", table: Table = STOCK) -> TableSql:
    kind = speech(dialect).kind
    update = _decrement_shape(UpdateOf(table, kind, dialect, ("sku",), ()), column).update
    assert update is not None
    return update


def test_an_update_is_sent_in_each_drivers_own_bind_style() -> None:
    sqlite = _shape(pysqlite.dialect())
    assert sqlite.driver is not None
    assert sqlite.driver.count("?") == 3  # qty - ?, sku = ?, qty >= ?
    assert sqlite.arguments(WHERE) == (3, "sku-1", 3)
    mysql = _shape(pymysql.dialect())
    assert mysql.driver is not None
    assert mysql.driver.count("%s") == 3
    assert mysql.arguments(WHERE) == (3, "sku-1", 3)
    # asyncpg: $1 … $n, each bind once however often the text uses it, with PostgreSQL casts.
    dollar = _shape(asyncpg.dialect())  # type: ignore[no-untyped-call]
    assert dollar.driver is not None
    assert dollar.driver.count("$1::INTEGER") == 2
    assert dollar.arguments(WHERE) == (3, "sku-1")
    named = _shape(psycopg.dialect())  # type: ignore[no-untyped-call]
    assert named.driver is not None
    assert "%(w0)s" in named.driver
    assert "%(n)s" in named.driver
    assert named.arguments(WHERE) is WHERE


def test_statements_sqlalchemy_must_process_go_through_it() -> None:
    sqlite: Any = pysqlite.dialect()
    # Numeric binds on SQLite are converted to float by the column type; an Enum validates.
    assert _shape(sqlite, "weight").driver is None
    assert _shape(psycopg.dialect(), "weight").driver is not None  # type: ignore[no-untyped-call]
    flow = StateMachine({"A": ["B"]}, column="grade")
    plan = flow._plan(UpdateOf(STOCK, "sqlite", sqlite, ("sku",), ()), "B", False)
    update = plan[0].update
    assert update is not None
    assert update.driver is None
    # A Python-side onupdate is a bind of its own, given by the call (mideng.state.defaults):
    # nothing is left for SQLAlchemy to compute, so the UPDATE still goes as the driver's SQL.
    touched = _shape(sqlite, table=TOUCHED)
    assert touched.driver is not None
    assert touched.driver.count("?") == 4
    assert touched.arguments({**WHERE, "u0": 1}) == (3, 1, "sku-1", 3)
    # A driver told each bind's type per execution (setinputsizes), which exec_driver_sql
    # would skip.
    told: Any = pysqlite.dialect(paramstyle="named")
    told.bind_typing = BindTyping.SETINPUTSIZES
    assert _shape(told).driver is None
    # A RETURNING insert's row is typed by the columns: SQLAlchemy reads it.
    shape = insert_shape(STOCK, "sqlite", sqlite, ("sku", "qty"), ("sku",))
    assert shape.insert.driver is None
    assert shape.read.driver is None


def test_dialects_share_compiled_statements_only_when_they_compile_alike() -> None:
    one, two = pysqlite.dialect(), pysqlite.dialect()
    assert speech(one) == speech(two)
    other = pysqlite.dialect(paramstyle="named")
    assert speech(other).key != speech(one).key
    assert speech(other).kind == "sqlite"
    assert speech(psycopg.dialect()).key != speech(asyncpg.dialect()).key  # type: ignore[no-untyped-call]


def test_both_ways_answer_alike_on_the_database(db: Db) -> None:
    """A decrement of an Integer column (the driver's own SQL) and of a Numeric one
    (SQLAlchemy's typed text) in the caller's transaction: same answers, values typed."""
    local = MetaData()
    goods = Table(
        f"goods_{uuid.uuid4().hex[:10]}",
        local,
        Column("sku", String(40), primary_key=True),
        Column("qty", Integer, nullable=False),
        Column("weight", Numeric(10, 2), nullable=False),
    )
    local.create_all(db.engine)
    sent: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        sent.append(statement)

    try:
        with db.engine.begin() as conn:
            conn.execute(goods.insert().values(sku="s", qty=5, weight=Decimal("5.50")))
        event.listen(db.engine, "before_cursor_execute", seen)
        with db.engine.connect() as conn:
            conn.begin()
            where = {"sku": "s"}
            assert decrement(conn, goods, where, "qty", 3) == Applied()
            assert decrement(conn, goods, where, "qty", 3) == Insufficient(2)
            assert decrement(conn, goods, where, "weight", Decimal("2.25")) == Applied()
            short = decrement(conn, goods, where, "weight", Decimal("4"))
            assert short == Insufficient(Decimal("3.25"))
            assert isinstance(short, Insufficient)
            assert isinstance(short.current, Decimal)
            conn.commit()
        # Only the driver's bind style reaches it: no ``:name`` left unbound in any text.
        assert len(sent) == 6
        assert not any(":w0" in s or ":n" in s for s in sent)
        with db.engine.connect() as conn:
            assert conn.execute(goods.select()).one()[1:] == (2, Decimal("3.25"))
    finally:
        event.remove(db.engine, "before_cursor_execute", seen)
        local.drop_all(db.engine)


def test_asyncpg_takes_the_dialects_own_sql() -> None:
    """asyncpg's bind style ($1, positional, each bind once) through AsyncConnection."""
    need("postgresql")
    local = MetaData()
    goods = Table(
        f"goods_{uuid.uuid4().hex[:10]}",
        local,
        Column("sku", String(40), primary_key=True),
        Column("qty", Integer, nullable=False),
        Column("status", String(20), nullable=False),
        Column("version", Integer, nullable=False),
    )
    url = POSTGRES_URL.replace("+psycopg", "+asyncpg")
    flow = StateMachine({"NEW": ["PAID"]})

    async def body() -> list[Any]:
        engine = create_async_engine(url)
        async with engine.begin() as conn:
            await conn.run_sync(local.create_all)
            await conn.execute(goods.insert().values(sku="s", qty=5, status="NEW", version=0))
        try:
            async with engine.connect() as conn:
                await conn.begin()
                where = {"sku": "s"}
                answers = [
                    await adecrement(conn, goods, where, "qty", 3),
                    await adecrement(conn, goods, where, "qty", 3),
                    await aupdate_versioned(conn, goods, where, {"qty": 9}, version=0),
                    await aupdate_versioned(conn, goods, where, {"qty": 9}, version=0),
                    await flow.aadvance(conn, goods, where, "PAID"),
                    await flow.aadvance(conn, goods, where, "PAID"),
                ]
                await conn.commit()
                row = (await conn.execute(goods.select())).one()
                return [*answers, tuple(row)]
        finally:
            async with engine.begin() as conn:
                await conn.run_sync(local.drop_all)
            await engine.dispose()

    assert asyncio.run(body()) == [
        Applied(),
        Insufficient(2),
        Applied(1),
        Conflict(1),
        Applied(),
        AlreadyThere(),
        ("s", 9, "PAID", 1),
    ]


def test_mysql_8s_insert_goes_as_the_drivers_sql_and_hands_back_its_id() -> None:
    """MySQL 8 has no RETURNING: its insert (a statement without rows, so the driver's own
    SQL) answers with the OK packet's last insert id, here on MariaDB with those statements."""
    need("mysql")
    local = MetaData()
    orders = business_tables(local, uuid.uuid4().hex[:10])["orders"]
    engine = create_engine(MYSQL_URL)
    local.create_all(engine)
    key = new_key()
    try:
        with engine.connect() as conn:
            given = ("order_no", "amount")
            shape = insert_shape(orders, "mysql", conn.dialect, given, ("order_no",))
            assert shape.insert.driver is not None
            assert shape.insert.stamp
            values = {"order_no": key, "amount": 3}
            conn.begin()
            made = drive(insert_once_op(shape, values, conn.dialect), execute, conn)
            again = drive(insert_once_op(shape, values, conn.dialect), execute, conn)
            conn.commit()
            [stored] = conn.execute(orders.select().where(orders.c.order_no == key)).all()
    finally:
        local.drop_all(engine)
        engine.dispose()
    assert made == Inserted({**values, "id": stored.id})
    assert isinstance(again, Existing)
    assert again.row["id"] == stored.id


def test_an_insert_takes_the_calls_values_as_given_where_the_keys_are_plain_names() -> None:
    """Binds named by the columns' keys: a call's values go to SQLAlchemy as they are. A key
    that is no plain bind name, or one a default's bind takes (``d0``), gets numbered binds."""
    sqlite: Any = pysqlite.dialect()
    plain = insert_shape(STOCK, "sqlite", sqlite, ("sku", "qty"), ("sku",))
    assert (plain.names, plain.key_names) == (None, None)
    assert ":sku" in plain.insert.text
    assert ":qty" in plain.insert.text
    assert ":sku" in plain.read.text
    local = MetaData()
    odd = Table(
        "odd_compiled",
        local,
        Column("sku", String(40), primary_key=True, key="the sku"),
        Column("qty", Integer, nullable=False),
    )
    numbered = insert_shape(odd, "sqlite", sqlite, ("the sku", "qty"), ("the sku",))
    assert numbered.names == ("v0", "v1")
    assert numbered.key_names == ("w0",)
    taken = Table(
        "taken_compiled",
        local,
        Column("sku", String(40), primary_key=True),
        Column("d0", Integer, nullable=False),
        Column("stamp", Integer, default=lambda: 1),  # its bind is d0
    )
    clash = insert_shape(taken, "sqlite", sqlite, ("sku", "d0"), ("sku",))
    assert clash.names == ("v0", "v1")
    assert [f.bind for f in clash.filled] == ["d0"]


def test_an_insert_with_either_binds_stores_and_reads_the_same_rows(db: Db) -> None:
    """A key that is no bind name, a column named like a default's bind, plain keys with a
    default: each inserts its row, answers it, and answers it again as Existing; the caller's
    values are left as they were."""
    local = MetaData()
    suffix = uuid.uuid4().hex[:10]
    odd = Table(
        f"odd_{suffix}",
        local,
        Column("sku", String(40), primary_key=True, key="the sku"),
        Column("qty", Integer, nullable=False),
    )
    taken = Table(
        f"taken_{suffix}",
        local,
        Column("sku", String(40), primary_key=True),
        Column("d0", Integer, nullable=False),
        Column("stamp", Integer, default=lambda: 7),
    )
    stamped = Table(  # plain keys and a Python-side default: the values are copied to add it
        f"stamped_{suffix}",
        local,
        Column("sku", String(40), primary_key=True),
        Column("qty", Integer, nullable=False),
        Column("stamp", Integer, default=lambda: 7),
    )
    local.create_all(db.engine)
    try:
        for table, values, key, retry in (
            (odd, {"the sku": "s", "qty": 2}, "the sku", {"qty": 9}),
            (taken, {"sku": "s", "d0": 3}, "sku", {"d0": 9}),
            (stamped, {"sku": "s", "qty": 4}, "sku", {"qty": 9}),
        ):
            given = dict(values)
            with db.engine.connect() as conn:
                conn.begin()
                made = insert_once(conn, table, values, unique=key)
                again = insert_once(conn, table, {**values, **retry}, unique=key)
                conn.commit()
            assert values == given
            assert isinstance(made, Inserted)
            assert isinstance(again, Existing)
            assert dict(again.row) == dict(made.row)
            assert {k: made.row[k] for k in values} == values
            assert made.row.get("stamp", 7) == 7
    finally:
        local.drop_all(db.engine)
