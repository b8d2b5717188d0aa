"""Scenarios of the state primitives on Django models and Django's connection, run in a process
of their own per database (see tests/db/django_project.py): ``python -m
tests.state.models_scenarios`` prints what each found as one JSON object.
``python -m tests.state.models_scenarios race <gate file>`` is one of the two processes of the
cross-process race: it waits for the gate file, races with its threads and prints its answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.db import connection, connections, models, transaction

from mideng.errors import ConfigurationError
from mideng.state import (
    StateMachine,
    ainsert_once,
    decrement,
    insert_once,
    update_versioned,
)
from tests.db.django_scenarios import (
    OUTBOX,
    RECORDS,
    SUFFIX,
    Boom,
    count,
    guard,
    in_atomic,
    mideng_tables,
    outbox,
    quoted,
    run_all,
    steps_of,
)


class Customer(models.Model):
    name: Any = models.CharField(max_length=40)

    class Meta:
        app_label = "scenario"
        db_table = f"st_customer_{SUFFIX}"


class Status(models.TextChoices):
    NEW = "NEW"
    PAID = "PAID"
    SHIPPED = "SHIPPED"
    CANCELLED = "CANCELLED"


class Order(models.Model):
    customer: Any = models.ForeignKey(Customer, on_delete=models.CASCADE)
    number: Any = models.CharField(max_length=40)
    status: Any = models.CharField(max_length=20, choices=Status.choices, default=Status.NEW)
    stock: Any = models.IntegerField(default=5)
    version: Any = models.IntegerField(default=0)
    note: Any = models.CharField(max_length=40, db_column="remark", default="")
    made: Any = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "scenario"
        db_table = f"st_order_{SUFFIX}"
        constraints = (models.UniqueConstraint(fields=["customer", "number"], name=f"uq_{SUFFIX}"),)


class Shipping(Order):
    """A proxy: its rows are Order's."""

    class Meta:
        app_label = "scenario"
        proxy = True


class Priced(models.Model):
    price: Any = models.IntegerField()

    class Meta:
        app_label = "scenario"
        abstract = True


class Slot(models.Model):
    day: Any = models.IntegerField()
    room: Any = models.CharField(max_length=10)
    taken: Any = models.IntegerField(default=0)
    code: Any = models.UUIDField(default=uuid.uuid4)
    booked: Any = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "scenario"
        db_table = f"st_slot_{SUFFIX}"
        unique_together = (("day", "room"),)


flow = StateMachine(
    {Status.NEW: [Status.PAID, Status.CANCELLED], Status.PAID: [Status.SHIPPED]},
    initial=Status.NEW,
)


def name_of(answer: Any) -> str:
    return type(answer).__name__


def new_order(number: str, stock: int = 5) -> int:
    customer = Customer.objects.get_or_create(name="ada")[0]
    return int(Order.objects.create(customer=customer, number=number, stock=stock).pk)


def state(pk: int) -> dict[str, Any]:
    row = Order.objects.values("status", "stock", "version").get(pk=pk)
    return {"status": row["status"], "stock": row["stock"]}


def facts(key: str) -> dict[str, int]:
    """The record of ``key`` and its outbox row."""
    where = "scope = %s AND " + quoted("key") + " = %s"
    return {
        "record": count(RECORDS, where, "orders", key),
        "outbox": count(OUTBOX, "aggregateid = %s", key),
    }


# -- the answers -----------------------------------------------------------------------------
def answers() -> dict[str, Any]:
    customer = Customer.objects.create(name="grace")
    values = {"customer": customer, "number": "A-1", "note": "first"}
    first = insert_once(connection, Order, values, unique=("customer", "number"))
    again = insert_once(
        "default", Order, {**values, "note": "second"}, unique=("customer_id", "number")
    )
    pk = first.row["id"]
    found: dict[str, Any] = {
        "inserted": name_of(first),
        "row": sorted(first.row),
        "aware": first.row["made"].tzinfo is not None,
        "existing": [name_of(again), again.row["note"], again.row["id"] == pk],
        "advance": [
            name_of(flow.advance(connection, Order, pk, Status.PAID)),
            name_of(
                flow.advance(connection, Order, {"number": "A-1", "customer": customer}, "PAID")
            ),
            repr(flow.advance(connection, Order, pk, Status.NEW)),
            name_of(flow.advance(connection, Order, 10**9, Status.PAID)),
        ],
        "decrement": [
            name_of(decrement(connection, Order, pk, "stock", 3)),
            repr(decrement(connection, Order, {"pk": pk}, "stock", 3)),
            name_of(decrement(connection, Order, 10**9, "stock", 1)),
        ],
        "versioned": [
            repr(update_versioned(connection, Order, pk, {"note": "v"}, version=0)),
            repr(update_versioned(connection, Order, pk, {"note": "w"}, version=0)),
        ],
        "stored": Order.objects.values_list("status", "stock", "version", "note").get(pk=pk),
    }
    found["refused"] = [_refused(call) for call in _bad_calls(pk)]
    return found


def _bad_calls(pk: int) -> list[Callable[[], Any]]:
    from sqlalchemy import create_engine

    engine = create_engine(os.environ["SCENARIO_STORE"])
    return [
        lambda: decrement(connection, Order, {"nothing": 1}, "stock", 1),
        lambda: decrement(connection, Order, {"status": "NEW"}, "stock", 1),  # many rows
        lambda: flow.advance(engine.connect(), Order, pk, Status.PAID),
        lambda: ainsert_once(connection, Order, {"number": "x"}, unique="number").send(None),
        lambda: insert_once(connection, Order, {"number": "B"}, unique="number"),
        lambda: decrement(connection, Order, "not a number", "stock", 1),
    ]


def _refused(call: Callable[[], Any]) -> str:
    try:
        call()
    except ConfigurationError as exc:
        return str(exc)
    return "not refused"


def round_trips() -> dict[str, Any]:
    """The statements each call sends, as Django counts them (inside an atomic block, so
    nothing but the primitive's own): one on the happy path, a read-back only on a miss."""
    from django.test.utils import CaptureQueriesContext

    pk = new_order("Q-1", stock=1)
    calls: dict[str, Callable[[], Any]] = {
        "advance": lambda: flow.advance(connection, Order, pk, Status.PAID),
        "advance again": lambda: flow.advance(connection, Order, pk, Status.PAID),
        "decrement": lambda: decrement(connection, Order, pk, "stock", 1),
        "decrement short": lambda: decrement(connection, Order, pk, "stock", 1),
        "insert": lambda: insert_once(
            connection, Slot, {"day": 1, "room": "a"}, unique=("day", "room")
        ),
        "insert again": lambda: insert_once(
            connection, Slot, {"day": 1, "room": "a"}, unique=("room", "day")
        ),
    }
    found = {}
    with transaction.atomic():
        for name, call in calls.items():
            with CaptureQueriesContext(connection) as queries:
                answer = call()
            found[name] = [name_of(answer), len(queries)]
    return found


def kinds_of_models() -> dict[str, Any]:
    """A proxy model is its concrete model's table; an abstract one has none; a
    ``unique_together`` is a unique key."""
    pk = new_order("M-1")
    made = insert_once(connection, Slot, {"day": 2, "room": "b"}, unique=("day", "room"))
    again = insert_once(connection, Slot, {"day": 2, "room": "b"}, unique=("day", "room"))
    found: dict[str, Any] = {
        "types": [_types(made.row), _types(again.row)],
        "table": repr(decrement(connection, _plain_orders(), {"id": pk}, "stock", 6)),
        "proxy": name_of(flow.advance(connection, Shipping, pk, Status.PAID)),
        "proxied": state(pk)["status"],
        "abstract": _refused(lambda: decrement(connection, Priced, 1, "price", 1)),
        "together": name_of(decrement(connection, Slot, {"day": 1, "room": "a"}, "taken", 1)),
    }
    return found


def _types(row: Any) -> list[str]:
    """The Python types of a Slot row's UUID and datetime, as Django reads them."""
    return [type(row["code"]).__name__, type(row["booked"]).__name__]


def _plain_orders() -> Any:
    """Order's table as a plain SQLAlchemy Table, with no model."""
    from sqlalchemy import Column, Integer, MetaData, Table

    return Table(
        Order._meta.db_table,
        MetaData(),
        Column("id", Integer, primary_key=True),
        Column("stock", Integer),
    )


def mysql_statements() -> dict[str, Any]:
    """On MariaDB, MySQL 8's statements (no RETURNING: a duplicate insert's error caught, the
    new row's id from the OK packet), as a MySQL 8 server gets them; the caller's block goes
    on after the duplicate's error."""
    if connection.vendor != "mysql":
        return {}
    wrapper = connections["default"]  # the connection itself: the proxy has a __dict__ too
    wrapper.__dict__["mysql_is_mariadb"] = False  # over Django's cached answer
    wrapper.features.__dict__["has_native_uuid_field"] = False  # as on MySQL
    try:
        with transaction.atomic():
            made = insert_once(connection, Slot, {"day": 8, "room": "m"}, unique=("day", "room"))
            again = insert_once(connection, Slot, {"day": 8, "room": "m"}, unique=("day", "room"))
            after = decrement(connection, Slot, made.row["id"], "taken", 1)
        from mideng.db.django_connection import django_kind

        kind = django_kind(connection)
    finally:
        del wrapper.__dict__["mysql_is_mariadb"]
        del wrapper.features.__dict__["has_native_uuid_field"]
    return {
        "kind": kind,
        "made": [name_of(made), sorted(made.row), _types(made.row)],
        "again": [name_of(again), again.row["id"] == made.row["id"]],
        "after": name_of(after),
    }


# -- atomic blocks ---------------------------------------------------------------------------
def paid(key: str, pk: int) -> None:
    """A unit of work: claim, advance the order, take stock, add the message."""
    with guard.transaction(connection, "orders", key) as tx:
        flow.advance(connection, Order, pk, Status.PAID)
        decrement(connection, Order, pk, "stock", 2)
        outbox.add(connection, "orders.paid", {"order": pk}, key=key)
        tx.set_result(pk)


def rolled_back() -> dict[str, Any]:
    pk = new_order("R-1")
    try:
        with transaction.atomic():
            paid("k-state-raise", pk)
            raise Boom
    except Boom:
        pass
    kept = new_order("R-2")
    with transaction.atomic():
        paid("k-state-kept", kept)
    return {
        "raised": {**facts("k-state-raise"), **state(pk)},
        "committed": {**facts("k-state-kept"), **state(kept)},
    }


def inner_rolled_back() -> dict[str, Any]:
    outer, inner = new_order("I-1"), new_order("I-2")
    with transaction.atomic():
        flow.advance(connection, Order, outer, Status.PAID)
        try:
            with transaction.atomic():
                paid("k-state-inner", inner)
                decrement(connection, Order, outer, "stock", 1)
                raise Boom
        except Boom:
            pass
        decrement(connection, Order, outer, "stock", 4)
    return {"outer": state(outer), "inner": {**facts("k-state-inner"), **state(inner)}}


@guard.step("ship", conn="conn")
def ship(conn: Any, pk: int) -> str:
    return name_of(flow.advance(conn, Order, pk, Status.PAID))


@guard.operation("ship_order", key="{number}")
def ship_order(number: str, pk: int, fail: bool) -> dict[str, Any]:
    in_atomic(lambda: ship(connection, pk), fail)
    return {"steps": steps_of("ship_order", number), **state(pk)}


def steps() -> dict[str, Any]:
    return {
        "kept": ship_order("S-1", new_order("S-1"), False),
        "undone": ship_order("S-2", new_order("S-2"), True),
    }


# -- races -----------------------------------------------------------------------------------
THREADS = 4


def race(pk: int, threads: int, gate: Callable[[], None]) -> dict[str, list[str]]:
    """``threads`` threads, each on its own connection, each advancing the order to PAID and
    taking one unit of its stock in its own atomic block, all let go at once."""
    found: dict[str, list[str]] = {"advance": [], "decrement": []}
    start = threading.Barrier(threads)

    def one() -> None:
        conn = connections["default"]  # this thread's own connection
        try:
            gate()
            start.wait()
            with transaction.atomic():
                found["advance"].append(name_of(flow.advance(conn, Order, pk, Status.PAID)))
            with transaction.atomic():
                found["decrement"].append(name_of(decrement(conn, Order, pk, "stock", 1)))
        except Exception as exc:
            found["advance"].append(repr(exc))
        finally:
            conn.close()

    workers = [threading.Thread(target=one) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return found


def threads() -> dict[str, Any]:
    pk = new_order("T-1", stock=5)
    found = race(pk, 8, lambda: None)
    return {
        "advance": Counter(found["advance"]),
        "decrement": Counter(found["decrement"]),
        **state(pk),
    }


def processes() -> dict[str, Any]:
    """Two processes of ``THREADS`` threads each, let go together by a gate file."""
    pk = new_order("P-1", stock=5)
    gate = Path(os.environ.get("TMPDIR", "/tmp")) / f"gate-{SUFFIX}"
    command = [sys.executable, "-m", "tests.state.models_scenarios", "race", str(pk), str(gate)]
    children = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    gate.write_text("go")
    advance: Counter[str] = Counter()
    taken: Counter[str] = Counter()
    for child in children:
        out, _ = child.communicate(timeout=120)
        found = json.loads(out.strip().splitlines()[-1])
        advance.update(found["advance"])
        taken.update(found["decrement"])
    gate.unlink()
    return {"advance": advance, "decrement": taken, **state(pk)}


def racer(pk: int, gate: Path) -> None:
    def wait() -> None:
        while not gate.exists():  # the start line, not a wait for the race's outcome
            time.sleep(0.005)

    print(json.dumps(race(pk, THREADS, wait)))


SCENARIOS: dict[str, Callable[[], dict[str, Any]]] = {
    "answers": answers,
    "round_trips": round_trips,
    "kinds_of_models": kinds_of_models,
    "mysql_statements": mysql_statements,
    "rolled_back": rolled_back,
    "inner_rolled_back": inner_rolled_back,
    "steps": steps,
    "threads": threads,
    "processes": processes,
}


def main() -> None:
    with mideng_tables(Customer, Order, Slot):
        found = run_all(SCENARIOS)
    print(json.dumps(found, default=str))


if __name__ == "__main__":
    if sys.argv[1:2] == ["race"]:
        racer(int(sys.argv[2]), Path(sys.argv[3]))
        guard.store.close()
    else:
        main()
