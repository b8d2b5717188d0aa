"""Key layout 2: a result or error longer than rows.INLINE is kept in a string beside the record's
hash (its body), so the hash stays a listpack; the two are one record in every operation."""

from __future__ import annotations

import dataclasses
import math
import multiprocessing
import os
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from mideng import Guard
from mideng.core.record import ClaimRequest, Outcome, Resolution, Status, Ticket
from mideng.stores.batch import Completion
from mideng.stores.redis import RedisStore
from mideng.stores.redis.layout import LAYOUT
from mideng.stores.redis.rows import INLINE, body_name
from mideng.stores.survey import SurveyTerms
from mideng.version import __version__
from tests.backends_redis import delete_prefix, expiry_ms
from tests.helpers.racer import race
from tests.redis_cluster import cluster
from tests.services import REDIS_URL, need

LONG = b"r" * 2048
MEDIUM = b"m" * 100


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def prefix() -> str:
    return f"mideng-body-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def client(prefix: str) -> Iterator[redis.Redis]:
    need("redis")
    opened = redis.Redis.from_url(REDIS_URL)
    yield opened
    delete_prefix(redis.Redis.from_url(REDIS_URL), prefix)
    opened.close()


@pytest.fixture
def store(prefix: str, client: redis.Redis) -> Iterator[RedisStore]:
    opened = RedisStore.from_url(REDIS_URL, prefix=prefix)
    yield opened
    opened.close()


def request(key: str, lease: float = 30.0, ttl: float | None = 60.0, **kw: Any) -> ClaimRequest:
    return ClaimRequest("pay", key, uuid.uuid4().hex, lease, ttl, **kw)


def body(store: RedisStore, key: str) -> str:
    return body_name(store.key("pay", key).encode()).decode()


def encoding(client: redis.Redis, name: str) -> str:
    return client.object("encoding", name).decode()  # type: ignore[no-any-return]


# -- compact whatever the size ---------------------------------------------------------------------
@pytest.mark.parametrize("result", [MEDIUM, LONG], ids=["100B", "2kB"])
def test_a_long_result_leaves_the_hash_a_listpack(
    store: RedisStore, client: redis.Redis, result: bytes
) -> None:
    claim = store.claim(request("k"))
    done = store.complete(Ticket.of(claim.record), result, "json", 60)
    name = store.key("pay", "k")
    assert encoding(client, name) == "listpack"
    assert client.get(body(store, "k")) == result
    assert client.hget(name, "r") is None
    assert done.result == result
    assert store.get("pay", "k") == done
    again = store.claim(request("k"))
    assert again.outcome is Outcome.REPLAY
    assert again.record.result == result


def test_a_short_result_stays_in_the_hash_with_no_body(
    store: RedisStore, client: redis.Redis
) -> None:
    claim = store.claim(request("k"))
    store.complete(Ticket.of(claim.record), b"s" * INLINE, "json", 60)
    assert client.hget(store.key("pay", "k"), "r") == b"s" * INLINE
    assert client.exists(body(store, "k")) == 0


def test_a_long_error_is_kept_beside_and_a_retry_drops_it(
    store: RedisStore, client: redis.Redis
) -> None:
    error = b"e" * 500
    claim = store.claim(request("k", max_attempts=3))
    failed = store.fail(Ticket.of(claim.record), error, 60)
    assert encoding(client, store.key("pay", "k")) == "listpack"
    assert store.get("pay", "k") == failed
    assert failed.error == error
    # A retry takes the record over: the error (and its body) is gone with it.
    retry = store.claim(request("k", max_attempts=3))
    assert retry.outcome is Outcome.ACQUIRED
    assert retry.record.error is None
    assert client.exists(body(store, "k")) == 0
    assert client.hget(store.key("pay", "k"), "x") is None


def test_guard_replays_a_2kb_result(store: RedisStore) -> None:
    guard = Guard(store)
    runs: list[int] = []

    def work() -> str:
        runs.append(1)
        return "v" * 2048

    assert guard.run("pay", "g", work) == "v" * 2048
    assert guard.run("pay", "g", work) == "v" * 2048
    assert runs == [1]


@pytest.mark.anyio
async def test_async_complete_and_replay_of_a_long_result(store: RedisStore) -> None:
    claim = await store.aclaim(request("a"))
    await store.acomplete(Ticket.of(claim.record), LONG, "json", 60)
    again = await store.aclaim(request("a"))
    await store.aclose()
    assert again.outcome is Outcome.REPLAY
    assert again.record.result == LONG


# -- one record: same expiry, deleted together -----------------------------------------------------
def test_the_body_expires_at_the_records_stamp(store: RedisStore, client: redis.Redis) -> None:
    name, beside = store.key("pay", "k"), body(store, "k")
    claim = store.claim(request("k", ttl=60))
    done = store.complete(Ticket.of(claim.record), LONG, "json", 5)
    assert done.expires_at is not None
    assert expiry_ms(client, beside) == expiry_ms(client, name) == math.ceil(done.expires_at * 1000)
    # Kept for ever: both lose their expiry.
    claim = store.claim(request("f", ttl=None))
    store.complete(Ticket.of(claim.record), LONG, "json", None)
    assert expiry_ms(client, body(store, "f")) == expiry_ms(client, store.key("pay", "f")) == -1


def test_both_keys_are_gone_once_the_record_expires(store: RedisStore, client: redis.Redis) -> None:
    claim = store.claim(request("k", ttl=60))
    store.complete(Ticket.of(claim.record), LONG, "json", 0.05)
    name, beside = store.key("pay", "k"), body(store, "k")
    deadline = time.monotonic() + 10
    while client.exists(name) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert client.exists(name) == 0
    # Same stamp: once Redis holds the hash expired, the body is too.
    assert client.exists(beside) == 0
    assert store.claim(request("k")).outcome is Outcome.ACQUIRED


def test_forget_and_evict_delete_both(store: RedisStore, client: redis.Redis) -> None:
    claim = store.claim(request("k"))
    store.complete(Ticket.of(claim.record), LONG, "json", 60)
    assert store.forget("pay", "k")
    assert client.exists(store.key("pay", "k"), body(store, "k")) == 0

    # A kept failure with a long error, evicted by an operator.
    claim = store.claim(request("e", max_attempts=1))
    store.fail(Ticket.of(claim.record), b"e" * 300, 60)
    store.resolve("pay", "e", Resolution(None, None, False, None, evict=True))
    assert client.exists(store.key("pay", "e"), body(store, "e")) == 0


def test_resolving_a_long_error_to_a_short_result_drops_the_body(
    store: RedisStore, client: redis.Redis
) -> None:
    claim = store.claim(request("k", max_attempts=1))
    store.fail(Ticket.of(claim.record), b"e" * 300, 60)
    settled = store.resolve("pay", "k", Resolution(b"ok", "json", False, 60))
    assert settled.result == b"ok"
    assert settled.error is None
    assert client.exists(body(store, "k")) == 0
    assert client.hget(store.key("pay", "k"), "x") is None
    assert store.get("pay", "k") == settled


def test_purge_older_deletes_the_body(store: RedisStore, client: redis.Redis) -> None:
    claim = store.claim(request("k"))
    store.complete(Ticket.of(claim.record), LONG, "json", None)
    assert store.purge_older(0) == 1
    assert client.exists(store.key("pay", "k"), body(store, "k")) == 0


def test_a_copy_replaces_the_body_or_drops_it(store: RedisStore, client: redis.Redis) -> None:
    claim = store.claim(request("k"))
    done = store.complete(Ticket.of(claim.record), LONG, "json", 60)
    later = done.updated_at + 1
    assert store.put(dataclasses.replace(done, result=b"x" * 80, updated_at=later))
    assert client.get(body(store, "k")) == b"x" * 80
    assert store.put(dataclasses.replace(done, result=b"short", updated_at=later + 1))
    assert client.exists(body(store, "k")) == 0
    found = store.get("pay", "k")
    assert found is not None
    assert found.result == b"short"


def test_a_body_lost_apart_from_its_hash_loses_the_record(
    store: RedisStore, client: redis.Redis
) -> None:
    """A server evicting under maxmemory may drop one key alone: the record is then lost
    whole (the work runs again), never replayed without its result."""
    claim = store.claim(request("k"))
    store.complete(Ticket.of(claim.record), LONG, "json", 60)
    client.delete(body(store, "k"))
    assert store.get("pay", "k") is None
    assert client.exists(store.key("pay", "k")) == 0
    again = store.claim(request("k"))
    assert again.outcome is Outcome.ACQUIRED
    assert again.record.fence == 1


# -- operator views -------------------------------------------------------------------------------
def test_operator_views_read_the_body(store: RedisStore) -> None:
    claim = store.claim(request("s"))
    store.begin_steps("pay", "s", claim.record.owner, b"args", "json")
    store.complete(Ticket.of(claim.record), LONG, "json", 60)
    entry = store.operation("pay", "s")
    assert entry is not None
    assert entry.record is not None
    assert entry.record.result == LONG
    claim = store.claim(request("u", max_attempts=1))
    store.fail(Ticket.of(claim.record), b"e" * 300, 60)
    survey = store.count_records(SurveyTerms(prefix="pay"))
    assert survey.total == 2
    # A record's footprint counts its body.
    assert {big.key: big.bytes > 2048 for big in survey.biggest} == {"s": True, "u": False}


# -- batches ---------------------------------------------------------------------------------------
def test_batch_completions_keep_long_results_beside(store: RedisStore, client: redis.Redis) -> None:
    reqs = [request(f"b{i}") for i in range(5)]
    claims = store.claim_many(reqs)
    items = [
        Completion(Ticket.of(c.record), LONG + bytes([i]), "json", 60) for i, c in enumerate(claims)
    ]
    done = store.complete_many(items)
    for i in range(5):
        assert encoding(client, store.key("pay", f"b{i}")) == "listpack"
        assert client.get(body(store, f"b{i}")) == LONG + bytes([i])
    again = store.claim_many([request(f"b{i}") for i in range(5)])
    assert [c.outcome for c in again] == [Outcome.REPLAY] * 5
    assert [c.record.result for c in again] == [LONG + bytes([i]) for i in range(5)]
    assert [d.result for d in done] == [LONG + bytes([i]) for i in range(5)]  # type: ignore[union-attr]


# -- old records -----------------------------------------------------------------------------------
def write_layout_1(client: redis.Redis, store_key: str, result: bytes) -> None:
    """A succeeded record as layout 1 wrote it: every field in the hash, the result too."""
    now = time.time()
    client.hset(
        store_key,
        mapping={
            "s": "succeeded",
            "f": "1",
            "o": "old-owner",
            "r": result,
            "c": "json",
            "a": "1",
            "ca": f"{now:.6f}",
            "ua": f"{now:.6f}",
            "ea": f"{now + 60:.6f}",
        },
    )
    client.pexpireat(store_key, math.ceil((now + 60) * 1000))


def test_a_layout_1_prefix_is_read_and_moved_to_layout_2(prefix: str, client: redis.Redis) -> None:
    client.set(f"{prefix}:layout", "1 0.9.0")
    old = f"{prefix}:{{pay:old}}"
    write_layout_1(client, old, b'"' + b"o" * 2000 + b'"')
    assert encoding(client, old) == "hashtable"
    store = RedisStore.from_url(REDIS_URL, prefix=prefix)
    try:
        guard = Guard(store)
        assert guard.run("pay", "old", lambda: "ran again") == "o" * 2000
        assert client.get(f"{prefix}:layout") == f"{LAYOUT} {__version__}".encode()
        # The old record is read as it is; a new one is written in layout 2.
        assert guard.run("pay", "new", lambda: "n" * 2000) == "n" * 2000
        assert encoding(client, store.key("pay", "new")) == "listpack"
        # The next change of the old record writes it in layout 2.
        assert store.forget("pay", "old")
        assert guard.run("pay", "old", lambda: "o" * 2000) == "o" * 2000
        assert encoding(client, old) == "listpack"
    finally:
        store.close()


def test_a_layout_1_record_taken_over_loses_its_inline_result(
    store: RedisStore, client: redis.Redis
) -> None:
    name = store.key("pay", "k")
    write_layout_1(client, name, b"x" * 200)
    client.hset(name, mapping={"s": "processing", "lu": "1.000000"})  # its lease ran out
    taken = store.claim(request("k"))
    assert taken.outcome is Outcome.ACQUIRED
    assert taken.record.fence == 2
    assert client.hget(name, "r") is None
    done = store.complete(Ticket.of(taken.record), LONG, "json", 60)
    assert store.get("pay", "k") == done
    assert encoding(client, name) == "listpack"


# -- races ----------------------------------------------------------------------------------------
def test_threads_claiming_a_key_with_a_long_error_run_it_once(store: RedisStore) -> None:
    claim = store.claim(request("k", max_attempts=5))
    store.fail(Ticket.of(claim.record), b"e" * 300, 60)
    outcomes: list[Outcome] = []
    lock = threading.Lock()
    barrier = threading.Barrier(16)

    def claimer() -> None:
        barrier.wait()
        got = store.claim(request("k", max_attempts=5))
        with lock:
            outcomes.append(got.outcome)

    threads = [threading.Thread(target=claimer) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Counter(outcomes) == {Outcome.ACQUIRED: 1, Outcome.IN_PROGRESS: 15}
    found = store.get("pay", "k")
    assert found is not None
    assert found.status is Status.PROCESSING
    assert found.error is None


@pytest.mark.slow
def test_processes_and_threads_replay_2kb_results(
    prefix: str, client: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    processes, threads, size = 3, 8, 2048
    keys = [f"k{i}" for i in range(60)]
    runs_file = tmp_path / "runs.log"
    runs_file.touch()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(processes) as pool:
        results = pool.starmap(
            race,
            [(REDIS_URL, {"prefix": prefix}, "race", keys, threads, str(runs_file), size)]
            * processes,
        )
    lines = runs_file.read_text().split()
    assert sorted(lines[0::2]) == sorted(keys)  # each key ran once
    run_of = dict(zip(lines[0::2], lines[1::2], strict=True))
    for key in keys:
        answers = {a for seen in results for a in seen[key]}
        assert answers == {run_of[key].ljust(size, ".")}, key
        name = f"{prefix}:{{race:{key}}}"
        assert encoding(client, name) == "listpack"


# -- cluster ---------------------------------------------------------------------------------------
def test_the_body_shares_the_records_slot(store: RedisStore) -> None:
    from redis.crc import key_slot

    for scope, key in [("pay", "T1"), ("a:b", "c:d"), ("we{ird", "k}ey"), ("s", "{x}"), ("}", "k")]:
        name = store.key(scope, key)
        beside = store.commands.side_key("body", scope, key)
        assert body_name(name.encode()).decode() == beside
        assert key_slot(name.encode()) == key_slot(beside.encode()), (scope, key)


def test_long_results_on_a_cluster(prefix: str) -> None:
    node = cluster()
    store = RedisStore.from_url(node.url, prefix=prefix)
    client = node.client()
    try:
        guard = Guard(store)
        keys = [f"c{i}" for i in range(12)]
        for key in keys:
            assert guard.run("pay", key, lambda k=key: k * 300) == key * 300
        for key in keys:
            assert guard.run("pay", key, lambda: "again") == key * 300
            assert encoding(client, store.key("pay", key)) == "listpack"
        claims = store.claim_many([request(k) for k in ("m1", "m2", "m3")])
        items = [Completion(Ticket.of(c.record), LONG, "json", 60) for c in claims]
        store.complete_many(items)
        assert [c.record.result for c in store.claim_many([request("m1"), request("m2")])] == [
            LONG,
            LONG,
        ]
        assert store.forget("pay", "c0")
        assert client.exists(store.commands.side_key("body", "pay", "c0")) == 0
    finally:
        store.close()
        delete_prefix(client, prefix)
