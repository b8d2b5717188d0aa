"""StateMachine.advance under events that come twice and out of order, on SQLite, PostgreSQL
and MariaDB, sync and async.

A target no transition leads to (the initial state) answers from the read of the row, as
any other target does after a miss: AlreadyThere, Illegal or Missing. An Illegal says where
its target lies from the row: behind it (a late event), ahead of it (an early one), aside (on
another branch) or both (a cycle). A consumer following docs/state.md's recipe (acking the
late, retrying the early) ends every order in its last state with each transition applied
once, with several workers taking the events at once.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from mideng.state import AlreadyThere, Applied, Direction, Illegal, Missing, StateMachine
from tests.state.conftest import new_key, seed_order
from tests.state.recipe import verdict
from tests.state.sides import AsyncSide, Db, Side, using

ORDER_FLOW = {
    "NEW": ["PAID", "CANCELLED"],
    "PAID": ["SHIPPED", "REFUNDED"],
    "SHIPPED": ["DONE"],
}
BEHIND, AHEAD, ASIDE, BOTH = Direction.BEHIND, Direction.AHEAD, Direction.ASIDE, Direction.BOTH


def test_advance_to_the_initial_state_reads_the_row(db: Db, side: Side, mode: str) -> None:
    """Nothing leads to NEW, so no UPDATE could apply: one read answers, with or without a
    version and more columns, and writes nothing."""
    orders, flow = db.tables["orders"], StateMachine(ORDER_FLOW, initial="NEW")
    new, paid = new_key(), new_key()
    seed_order(db, new)
    seed_order(db, paid, status="PAID")
    with using(side, mode) as conn:
        with side.counted() as sent:
            assert side.advance(flow, conn, orders, {"order_no": new}, "NEW") == AlreadyThere()
            assert side.advance(flow, conn, orders, {"order_no": paid}, "NEW") == Illegal(
                "PAID", BEHIND
            )
            assert side.advance(flow, conn, orders, {"order_no": new_key()}, "NEW") == Missing()
            again = side.advance(
                flow, conn, orders, {"order_no": new}, "NEW", version=3, values={"note": "x"}
            )
            assert again == AlreadyThere()
        assert len(sent) == 4
        assert all(s.lstrip().upper().startswith("SELECT") for s in sent)
    [row] = db.rows(orders, order_no=new)
    assert (row["status"], row["version"], row["note"]) == ("NEW", 0, None)
    assert [r["status"] for r in db.rows(orders, order_no=paid)] == ["PAID"]


def test_a_second_state_nothing_leads_to(db: Db, side: Side) -> None:
    """Without ``initial``, IMPORTED is a root beside NEW: a row that started at NEW went
    another way (aside), one past PAID came through it or NEW (behind)."""
    orders = db.tables["orders"]
    flow = StateMachine({"NEW": ["PAID"], "IMPORTED": ["PAID"], "PAID": ["SHIPPED"]})
    at = {state: new_key() for state in ("NEW", "IMPORTED", "SHIPPED")}
    for state, key in at.items():
        seed_order(db, key, status=state)
    with using(side, "autocommit") as conn:
        answers = {
            state: side.advance(flow, conn, orders, {"order_no": key}, "IMPORTED")
            for state, key in at.items()
        }
    assert answers == {
        "NEW": Illegal("NEW", ASIDE),
        "IMPORTED": AlreadyThere(),
        "SHIPPED": Illegal("SHIPPED", BEHIND),
    }


def test_illegal_says_where_the_target_lies(db: Db, side: Side) -> None:
    orders = db.tables["orders"]
    flow = StateMachine(ORDER_FLOW, initial="NEW")
    # A review loop: CLOSED is both ahead of OPEN (through REVIEW) and behind it (reopened).
    loop = StateMachine(
        {"OPEN": ["REVIEW"], "REVIEW": ["CLOSED"], "CLOSED": ["OPEN", "ARCHIVED"]},
        initial="OPEN",
    )
    cases = [
        (flow, "NEW", "SHIPPED", Illegal("NEW", AHEAD)),
        (flow, "NEW", "DONE", Illegal("NEW", AHEAD)),
        (flow, "PAID", "DONE", Illegal("PAID", AHEAD)),
        (flow, "SHIPPED", "PAID", Illegal("SHIPPED", BEHIND)),
        (flow, "DONE", "PAID", Illegal("DONE", BEHIND)),
        (flow, "REFUNDED", "PAID", Illegal("REFUNDED", BEHIND)),
        (flow, "SHIPPED", "CANCELLED", Illegal("SHIPPED", ASIDE)),
        (flow, "CANCELLED", "SHIPPED", Illegal("CANCELLED", ASIDE)),
        (flow, "REFUNDED", "DONE", Illegal("REFUNDED", ASIDE)),
        (flow, "LEGACY", "PAID", Illegal("LEGACY", ASIDE)),  # a value the machine lacks
        (loop, "OPEN", "CLOSED", Illegal("OPEN", BOTH)),
        (loop, "ARCHIVED", "OPEN", Illegal("ARCHIVED", BEHIND)),
    ]
    keys = [new_key() for _ in cases]
    for key, (_, at, _, _) in zip(keys, cases, strict=True):
        seed_order(db, key, status=at)
    with using(side, "autocommit") as conn:
        answers = [
            side.advance(machine, conn, orders, {"order_no": key}, to)
            for key, (machine, _, to, _) in zip(keys, cases, strict=True)
        ]
    assert answers == [expected for *_, expected in cases]
    assert not any(answer.ok for answer in answers)
    # Nothing moved.
    assert [db.rows(orders, order_no=key)[0]["status"] for key in keys] == [c[1] for c in cases]


# -- a consumer --------------------------------------------------------------------------------
ORDERS, COPIES, WORKERS = 6, 3, 4
STEPS = ("PAID", "SHIPPED", "DONE")
# Deliveries before a consumer is taken to spin instead of converging.
LIMIT = 5000


class Deliveries:
    """A broker's queue as the workers see it: events handed out one at a time; one to retry
    goes back behind the others, to come again later. A worker that fails stops them all, so
    that the test ends with its error and no worker left running."""

    def __init__(self, events: list[tuple[str, str]]) -> None:
        self.waiting = deque(events)
        self.seen: list[tuple[str, str, Any, str]] = []
        self.lock = threading.Lock()
        self.failed = False

    def next(self) -> tuple[str, str] | None:
        with self.lock:
            assert len(self.seen) < LIMIT, "the events kept coming back"
            return self.waiting.popleft() if self.waiting and not self.failed else None

    @contextmanager
    def worker(self) -> Iterator[None]:
        try:
            yield
        except BaseException:
            self.failed = True
            raise

    def settle(self, event: tuple[str, str], answer: Any) -> None:
        decided = verdict(answer)
        with self.lock:
            self.seen.append((*event, answer, decided))
            if decided == "retry":
                self.waiting.append(event)


def events_of(orders: list[str]) -> list[tuple[str, str]]:
    """Every order's events (NEW, its creation, too), each COPIES times, shuffled, after each
    order's last two: early events first, duplicates and late ones all through."""
    copies = [(o, s) for o in orders for s in ("NEW", *STEPS) for _ in range(COPIES)]
    random.Random(len(orders)).shuffle(copies)
    return [*((o, "DONE") for o in orders), *((o, "SHIPPED") for o in orders), *copies]


def consume_on_threads(db: Db, flow: StateMachine, deliveries: Deliveries) -> None:
    orders = db.tables["orders"]

    def work() -> None:
        with deliveries.worker(), db.engine.connect() as conn:
            while (event := deliveries.next()) is not None:
                order_no, to = event
                deliveries.settle(event, flow.advance(conn, orders, {"order_no": order_no}, to))

    with ThreadPoolExecutor(WORKERS) as pool:
        for done in [pool.submit(work) for _ in range(WORKERS)]:
            done.result()


async def consume_on_tasks(side: AsyncSide, flow: StateMachine, deliveries: Deliveries) -> None:
    orders = side.db.tables["orders"]

    async def work() -> None:
        with deliveries.worker():
            async with side.async_engine.connect() as conn:
                while (event := deliveries.next()) is not None:
                    order_no, to = event
                    answer = await flow.aadvance(conn, orders, {"order_no": order_no}, to)
                    deliveries.settle(event, answer)

    # Every worker to its end (they stop once one has failed), then the first error.
    ended = await asyncio.gather(*(work() for _ in range(WORKERS)), return_exceptions=True)
    for error in ended:
        if error is not None:
            raise error


def test_duplicated_and_out_of_order_events(db: Db, side: Side) -> None:
    flow = StateMachine(ORDER_FLOW, initial="NEW")
    orders = [new_key() for _ in range(ORDERS)]
    for order_no in orders:
        seed_order(db, order_no)
    deliveries = Deliveries(events_of(orders))
    if isinstance(side, AsyncSide):
        side.loop.run_until_complete(consume_on_tasks(side, flow, deliveries))
    else:
        consume_on_threads(db, flow, deliveries)
    applied = Counter((o, to) for o, to, answer, _ in deliveries.seen if answer == Applied())
    assert applied == {(o, to): 1 for o in orders for to in STEPS}
    table = db.tables["orders"]
    assert [db.rows(table, order_no=o)[0]["status"] for o in orders] == ["DONE"] * ORDERS
    assert {decided for *_, decided in deliveries.seen} == {"ack", "retry"}
    # The early ones were retried, the late ones acked: both kinds came.
    illegal = {answer.direction for _, _, answer, _ in deliveries.seen if not answer.ok}
    assert illegal == {AHEAD, BEHIND}
