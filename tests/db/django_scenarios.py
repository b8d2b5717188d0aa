"""Scenarios of mideng on a Django connection, run in a process of their own (Django's settings
are process-wide, and the HTTP tests configure theirs): ``python -m tests.db.django_scenarios``
with ``DJANGO_SETTINGS_MODULE`` naming a project on one database, ``SCENARIO_STORE`` the same
database as a mideng store URL and ``SCENARIO_SUFFIX`` the tables' suffix. The store creates
its record tables, the outbox's come from ``mideng.schema.django``'s statements; it runs every
scenario, drops the tables and prints what each found as one JSON object."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import django

django.setup()

from django.db import connection, connections, transaction  # noqa: E402

from mideng import Guard, open_store  # noqa: E402
from mideng.errors import ConfigurationError  # noqa: E402
from mideng.outbox import Outbox  # noqa: E402
from mideng.schema import CURRENT  # noqa: E402
from mideng.schema.django import statements, undo  # noqa: E402

SUFFIX = os.environ["SCENARIO_SUFFIX"]
RECORDS, OUTBOX, ORDERS = f"rec_{SUFFIX}", f"box_{SUFFIX}", f"orders_{SUFFIX}"
STEPS = f"{RECORDS}_steps"
NAMES = {"tables": [RECORDS], "outboxes": [OUTBOX]}

guard = Guard(open_store(os.environ["SCENARIO_STORE"], table=RECORDS), lease=30)
guard.configure_scope("charge", on_expiry="unknown")
outbox = Outbox(connection, table=OUTBOX)


class Boom(Exception):
    pass


def sql(text: str, *params: Any) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(text, params)
        return list(cursor.fetchall()) if cursor.description else []


def count(table: str, where: str, *params: Any) -> int:
    return int(sql(f"SELECT COUNT(*) FROM {table} WHERE {where}", *params)[0][0])


def facts(key: str) -> dict[str, int]:
    """What of ``key`` is in the database: its record, order row and outbox row."""
    return {
        "record": count(RECORDS, "scope = %s AND " + quoted("key") + " = %s", "orders", key),
        "order": count(ORDERS, "id = %s", key),
        "outbox": count(OUTBOX, "aggregateid = %s", key),
    }


def quoted(name: str) -> str:
    return str(connection.ops.quote_name(name))


def order(key: str) -> None:
    sql(f"INSERT INTO {ORDERS} (id, status) VALUES (%s, %s)", key, "PAID")


def paid(key: str, conn: Any = connection) -> dict[str, Any]:
    """The unit of work the scenarios repeat: claim, write the order, add its message."""
    with guard.transaction(conn, "orders", key) as tx:
        if tx.replayed:
            return {"replayed": True, "result": tx.result}
        order(key)
        outbox.add(conn, "orders.paid", {"order": key}, key=key)
        tx.set_result({"order": key})
    return {"replayed": False}


def committed() -> dict[str, Any]:
    with transaction.atomic():
        first = paid("k-commit")
    with transaction.atomic():
        again = paid("k-commit")
    return {"first": first, "again": again, **facts("k-commit")}


def raised() -> dict[str, Any]:
    try:
        with transaction.atomic():
            paid("k-raise-before")
            with guard.transaction(connection, "orders", "k-raise") as tx:
                order("k-raise")
                outbox.add(connection, "orders.paid", {}, key="k-raise")
                tx.set_result(1)
            raise Boom
    except Boom:
        pass
    return {"raised": facts("k-raise"), "before": facts("k-raise-before")}


def inner_rolled_back() -> dict[str, Any]:
    with transaction.atomic():
        order("k-outer")
        try:
            with transaction.atomic():
                paid("k-inner")
                raise Boom
        except Boom:
            pass
        with guard.transaction(connection, "orders", "k-kept") as tx:
            outbox.add(connection, "orders.paid", {}, key="k-kept")
            try:
                with transaction.atomic():
                    order("k-kept")  # the block's own inner write, undone alone
                    raise Boom
            except Boom:
                pass
            tx.set_result(1)
    return {
        "outer": count(ORDERS, "id = %s", "k-outer"),
        "inner": facts("k-inner"),
        "kept": facts("k-kept"),
    }


def without_savepoint() -> dict[str, Any]:
    """A failed block without a savepoint dooms the caller's whole atomic block."""
    doomed = False
    try:
        with transaction.atomic():
            order("k-nosp-before")
            try:
                with guard.transaction(connection, "orders", "k-nosp", savepoint=False) as tx:
                    order("k-nosp")
                    tx.set_result(1)
                    raise Boom
            except Boom:
                doomed = transaction.get_rollback()
    except Boom:
        pass
    return {"doomed": doomed, "before": facts("k-nosp-before"), "block": facts("k-nosp")}


def by_hand() -> dict[str, Any]:
    """A transaction the caller manages with set_autocommit(False) is the caller's too; on
    SQLite, whose savepoints commit there, the block's savepoint is refused."""
    connection.set_autocommit(False)
    try:
        try:
            paid("k-hand")
            inside: Any = facts("k-hand")
        except ConfigurationError as exc:
            inside = str(exc)
        connection.rollback()
    finally:
        connection.set_autocommit(True)
    return {"inside": inside, "after": facts("k-hand")}


def outside_atomic() -> dict[str, Any]:
    with guard.transaction("default", "orders", "k-own") as tx:  # the alias; its own transaction
        order("k-own")
        tx.set_result(1)
    try:
        outbox.add(connection, "orders.paid", {}, key="k-loose")
        loose = "added"
    except ConfigurationError as exc:
        loose = str(exc)
    return {"own": facts("k-own"), "autocommit": connection.get_autocommit(), "loose": loose}


def concurrent() -> dict[str, Any]:
    runs: list[str] = []
    answers: list[Any] = []
    start = threading.Barrier(6)

    def one() -> None:
        conn = connections["default"]  # this thread's own connection
        try:
            start.wait()
            with transaction.atomic(), guard.transaction(conn, "orders", "k-race") as tx:
                if tx.replayed:
                    answers.append(tx.result)
                    return
                runs.append("ran")
                time.sleep(0.3)  # the others wait on the record meanwhile
                order("k-race")
                tx.set_result("first")
        except Exception as exc:
            answers.append(repr(exc))
        finally:
            conn.close()

    threads = [threading.Thread(target=one) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"runs": len(runs), "answers": answers, **facts("k-race")}


def refused() -> dict[str, Any]:
    found: dict[str, Any] = {}
    try:
        with transaction.atomic():
            guard.transaction(connection, "charge", "k-charge")
        found["inside"] = "claimed"
    except ConfigurationError as exc:
        found["inside"] = str(exc)
    with guard.transaction(connection, "charge", "k-charge") as tx:  # commits on its own
        tx.set_result("charged")
    found["outside"] = count(RECORDS, "scope = %s", "charge")
    return found


@guard.step("mark_paid", conn="conn")
def mark_paid(conn: Any, key: str) -> str:
    order(key)
    return "PAID"


def in_atomic(call: Callable[[], object], fail: bool) -> None:
    """``call`` in an atomic block, rolled back after it when ``fail``."""
    try:
        with transaction.atomic():
            call()
            if fail:
                raise Boom
    except Boom:
        pass


def steps_of(operation: str, key: str) -> int:
    """The steps an operation recorded (cleared once it is done: counted while it runs)."""
    where = "scope = %s AND " + quoted("key") + " = %s AND step <> %s"
    return count(STEPS, where, operation, key, "")


@guard.operation("pay", key="{key}")
def pay(key: str, fail: bool, atomic: bool = True) -> dict[str, int]:
    if not atomic:
        mark_paid(connection, key)  # in a block of its own, committed when the step returns
    in_atomic(lambda: mark_paid(connection, key) if atomic else None, fail)
    return {"steps": steps_of("pay", key), **facts(key)}


def steps() -> dict[str, Any]:
    return {
        "kept": pay("k-step", False),
        "undone": pay("k-step-undone", True),
        "own": pay("k-step-own", True, atomic=False),
    }


SCENARIOS: dict[str, Callable[[], dict[str, Any]]] = {
    "committed": committed,
    "raised": raised,
    "inner_rolled_back": inner_rolled_back,
    "without_savepoint": without_savepoint,
    "by_hand": by_hand,
    "outside_atomic": outside_atomic,
    "concurrent": concurrent,
    "refused": refused,
    "steps": steps,
}


def run_ddl(texts: list[str]) -> None:
    with connection.cursor() as cursor:
        for text in texts:
            cursor.execute(text)


@contextlib.contextmanager
def mideng_tables(*models: Any) -> Iterator[None]:
    """mideng's outbox tables (the store makes its record tables) and ``models``' tables, for
    the scenarios; all dropped, and the store closed, at the end."""
    vendor = connection.vendor
    for version in range(1, CURRENT + 1):
        run_ddl(statements(version, vendor, tables=[], outboxes=[OUTBOX]))
    with connection.schema_editor() as editor:
        for model in models:
            editor.create_model(model)
    try:
        yield
    finally:
        guard.store.close()
        with connection.schema_editor() as editor:
            for model in reversed(models):
                editor.delete_model(model)
        for version in range(CURRENT, 0, -1):
            run_ddl(undo(version, vendor, **NAMES))


def run_all(scenarios: dict[str, Callable[[], dict[str, Any]]]) -> dict[str, Any]:
    """What each scenario found, or the error it raised."""
    found: dict[str, Any] = {}
    for name, scenario in scenarios.items():
        try:
            found[name] = scenario()
        except Exception as exc:
            found[name] = {"error": repr(exc)}
    return found


def main() -> None:
    with mideng_tables():
        run_ddl([f"CREATE TABLE {ORDERS} (id VARCHAR(40) PRIMARY KEY, status VARCHAR(20))"])
        try:
            found = run_all(SCENARIOS)
            from mideng.db.django_connection import django_kind

            found["kind"] = django_kind(connection)
        finally:
            run_ddl([f"DROP TABLE {ORDERS}"])
    print(json.dumps(found))


if __name__ == "__main__":
    main()
