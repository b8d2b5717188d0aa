"""A multi-step operation per message through the adapter (mideng.messaging.OperationConsumer):
one record per message (the operation's, under the message's key), a copy acked without
running, a failed run resumed at its first unfinished step, and a consumer process SIGKILLed
between two remote steps whose redelivery resumes the operation: every step's effect once.

The consumer-level rules (what counts as an attempt, the dead letter at max_attempts, a copy
while the operation runs elsewhere) are tests/messaging/test_operation_consumer.py's."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

from sqlalchemy import text

from mideng import Guard
from mideng.core.record import Status
from mideng.messaging import OperationConsumer
from mideng.stores.sql import SQLStore
from tests.helpers.storm import Tables, Workers, runs_by_key, tables, wait_for
from tests.messaging.base.broker import Broker
from tests.messaging.running import consume_until
from tests.services import POSTGRES_URL, need

STEPS = ("reserve", "sms", "coupon")
#: Published before the key the consumer is killed on: work around the kill and the take-over.
OTHERS = [f"order:{n}" for n in range(3)]
CRASH_KEY = "order:crash"


def records(db: Tables) -> dict[str, tuple[str, int]]:
    """Every record of the table: its key, status and attempts."""
    with db.engine.connect() as conn:
        rows = conn.execute(text(f"SELECT scope, key, status, attempts FROM {db.records}"))
        return {f"{scope}:{key}": (str(status), int(n)) for scope, key, status, n in rows}


def each_step_once(db: Tables, keys: list[str]) -> dict[str, int]:
    return {f"{key}/{step}": 1 for key in keys for step in STEPS} | {
        k: n for k, n in db.effects_by_key().items() if n != 1
    }


class OperationCases:
    def test_one_record_per_message_and_a_failed_run_resumes(self, broker: Broker) -> None:
        need("postgresql")
        with tables(POSTGRES_URL) as db:
            store = SQLStore.from_url(POSTGRES_URL, table=db.records, create_schema=False)
            guard = Guard(store, lease=5)
            guard.configure_scope("notify", on_error="retry", max_attempts=5)
            runs: Counter[str] = Counter()

            def effect(what: str) -> None:
                with db.engine.begin() as conn:
                    conn.execute(
                        text(f"INSERT INTO {db.effects} (order_key, pid) VALUES (:k, 0)"),
                        {"k": what},
                    )

            @guard.step("reserve")
            def reserve(order: str) -> None:
                effect(f"{order}/reserve")

            @guard.step("sms")
            def sms(order: str) -> None:
                effect(f"{order}/sms")

            @guard.step("coupon")
            def coupon(order: str) -> None:
                if order == "order:flaky" and runs[order] == 1:
                    raise ConnectionError("coupon service down")
                effect(f"{order}/coupon")

            @guard.operation("notify", key="{order}", steps=STEPS)
            def notify(order: str) -> str:
                runs.update([order])
                reserve(order)
                sms(order)
                coupon(order)
                return "sent"

            consumer = OperationConsumer(guard, notify, retry_delay=0.2)
            keys = ["order:1", "order:2", "order:flaky"]
            broker.publish(
                [(k, json.dumps({"order": k}).encode()) for k in [*keys, "order:1", "order:2"]]
            )

            async def done() -> bool:
                return len(db.effects_by_key()) == 3 * len(keys) and await broker.asettled()

            try:
                asyncio.run(consume_until(lambda stop: broker.consume(consumer, stop), done))
            finally:
                store.close()
            assert broker.unsettled() == 0
            assert each_step_once(db, keys) == {f"{k}/{s}": 1 for k in keys for s in STEPS}
            # The copies were acked without running; the failed run came back and resumed.
            assert runs == Counter({"order:1": 1, "order:2": 1, "order:flaky": 2})
            # One record per message, the operation's: no consumer record beside it.
            assert records(db) == {
                "notify:order:1": (Status.SUCCEEDED.value, 1),
                "notify:order:2": (Status.SUCCEEDED.value, 1),
                "notify:order:flaky": (Status.SUCCEEDED.value, 2),
            }

    def test_killed_between_two_remote_steps_the_redelivery_resumes(
        self, broker: Broker, tmp_path: Path
    ) -> None:
        need("postgresql")
        with tables(POSTGRES_URL) as db:
            keys = [*OTHERS, CRASH_KEY]
            broker.publish([(k, json.dumps({"order": k}).encode()) for k in keys])
            marker, runs = tmp_path / "between-steps", tmp_path / "runs"
            config = {**db.config(), "mode": "operation", "scope": "notify", "lease": 2.0}
            pool = Workers(tmp_path, broker, {**config, "runs": str(runs)})
            try:
                victim = pool.start(
                    0, crash={"at": "between_steps", "key": CRASH_KEY, "marker": str(marker)}
                )
                try:
                    wait_for(marker.exists, 60, "the consumer to stop between sms and coupon")
                except AssertionError as exc:
                    raise AssertionError(f"{exc}\n{pool.logs()}") from None
                assert db.effect_pids(f"{CRASH_KEY}/sms") == [victim.pid]
                pool.kill(0)
                pool.start(0)

                def finished() -> bool:
                    return len(db.effects_by_key()) == 3 * len(keys) and broker.settled()

                try:
                    wait_for(finished, 60, "every step's effect and a settled broker")
                except AssertionError as exc:
                    raise AssertionError(f"{exc}: {broker.state()}\n{pool.logs()}") from None
            finally:
                exits = pool.stop_all()
            assert exits == [0], pool.logs()
            assert each_step_once(db, keys) == {f"{k}/{s}": 1 for k in keys for s in STEPS}
            # The sms the killed process sent was not sent again; the coupon came after it.
            assert db.effect_pids(f"{CRASH_KEY}/sms") == [victim.pid]
            assert db.effect_pids(f"{CRASH_KEY}/coupon") != [victim.pid]
            assert runs_by_key(runs)[CRASH_KEY] == 2  # the killed run and the resumed one
            # One record per message; the take-over is the crash key's second attempt, once.
            expected = {f"notify:{k}": (Status.SUCCEEDED.value, 1) for k in OTHERS}
            assert records(db) == {**expected, f"notify:{CRASH_KEY}": (Status.SUCCEEDED.value, 2)}
