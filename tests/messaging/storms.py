"""The storm and the two crash cases, written once for RabbitMQ and Redis Streams."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from tests.messaging.storm import Tables, Workers, runs_by_key, storm_messages, wait_for
from tests.services import need

MESSAGES, KEYS, WORKERS, KILLS = 2000, 1500, 3, 5


def storm(side: Any, db: Tables, workdir: Path, seed: int | None = None) -> None:
    """2,000 messages over 1,500 keys; 3 transactional consumers; slot 0 SIGKILLed at random
    points 5 times and restarted. Then: one effect per key, nothing missing, nothing left
    unacked or pending on the broker, every record completed."""
    seed = random.randrange(1 << 30) if seed is None else seed
    rng = random.Random(seed)
    side.publish(storm_messages(MESSAGES, KEYS, seed))
    pool = Workers(
        workdir, {"broker": side.broker, "url": side.url, "adapter": side.adapter(), **db.config()}
    )
    for slot in range(WORKERS):
        pool.start(slot)
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.3, 1.2))
            pool.kill(0)
            pool.start(0)

        def done() -> bool:
            return len(db.effects_by_key()) >= KEYS and side.settled()

        try:
            wait_for(done, 150, f"{KEYS} effects and a settled broker (seed {seed})", 0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{pool.logs()}") from None
    finally:
        exits = pool.stop_all()
    effects = db.effects_by_key()
    assert sorted(effects) == sorted(f"order:{n}" for n in range(KEYS)), f"seed {seed}"
    doubled = {k: c for k, c in effects.items() if c != 1}
    assert not doubled, f"keys with more than one effect (seed {seed}): {doubled}"
    assert exits == [0] * WORKERS, f"exit codes {exits}\n{pool.logs()}"
    assert side.settled()
    from sqlalchemy import text

    with db.engine.connect() as conn:
        statuses: dict[str, int] = dict(
            conn.execute(text(f"SELECT status, COUNT(*) FROM {db.records} GROUP BY status")).all()
        )
    assert statuses == {"succeeded": KEYS}, statuses


def crash(side: Any, db: Tables, workdir: Path, at: str) -> dict[str, int]:
    """One worker parks on key ``order:crash`` at ``at`` and is SIGKILLed there; a fresh one
    takes over. Returns the handler runs per key (committed or not)."""
    need("postgresql")
    marker, runs = workdir / "parked", workdir / "runs"
    messages = [(f"order:{n}", b"{}") for n in range(5)] + [("order:crash", b"{}")]
    side.publish(messages)
    config = {"broker": side.broker, "url": side.url, "adapter": side.adapter(), **db.config()}
    config.update(runs=str(runs), crash={"at": at, "key": "order:crash", "marker": str(marker)})
    pool = Workers(workdir, config)
    pool.start(0)
    try:
        wait_for(marker.exists, 30, f"the worker to park {at}")
        pool.kill(0)
        if at == "after_commit":
            assert db.effects_by_key().get("order:crash") == 1  # committed before the kill
        else:
            assert "order:crash" not in db.effects_by_key()  # rolled back with the process
        pool.start(0)
        wait_for(lambda: len(db.effects_by_key()) == 6 and side.settled(), 30, "recovery")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{pool.logs()}") from None
    finally:
        assert pool.stop_all() == [0], pool.logs()
    assert db.effects_by_key() == {k: 1 for k, _ in messages}
    return runs_by_key(runs)
