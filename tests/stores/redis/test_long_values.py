"""Key layout 2: a result or error longer than rows.INLINE is cut into pieces inside the record's
hash, so the hash stays a listpack whatever the result's size, and the record one key."""

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
from mideng.stores.redis.rows import IN_PIECES, INLINE, PIECES
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
    return f"mideng-long-{uuid.uuid4().hex[:10]}"


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


def keys(client: redis.Redis, prefix: str) -> set[str]:
    """Every key under prefix but the layout's."""
    found = {name.decode() for name in client.scan_iter(match=f"{prefix}:*")}
    return found - {f"{prefix}:layout"}


def fields(client: redis.Redis, name: str) -> set[str]:
    return {f.decode() if isinstance(f, bytes) else f for f in client.hkeys(name)}


def encoding(client: redis.Redis, name: str) -> str:
    return client.object("encoding", name).decode()  # type: ignore[no-any-return]


# -- compact whatever the size ---------------------------------------------------------------------
@pytest.mark.parametrize(("result", "pieces"), [(MEDIUM, 2), (LONG, 32)], ids=["100B", "2kB"])
def test_a_long_result_leaves_the_hash_a_listpack(
    store: RedisStore, client: redis.Redis, prefix: str, result: bytes, pieces: int
) -> None:
    claim = store.claim(request("k"))
    done = store.complete(Ticket.of(claim.record), result, "json", 60)
    name = store.key("pay", "k")
    assert encoding(client, name) == "listpack"
    assert client.hget(name, "x") == f"r{pieces}".encode()
    assert client.hget(name, "r") == IN_PIECES
    assert keys(client, prefix) == {name}  # one key: one expiry, one delete
    assert done.result == result
    assert store.get("pay", "k") == done
    again = store.claim(request("k"))
    assert again.outcome is Outcome.REPLAY
    assert again.record.result == result


def test_a_short_result_stays_whole(store: RedisStore, client: redis.Redis) -> None:
    claim = store.claim(request("k"))
    store.complete(Ticket.of(claim.record), b"s" * INLINE, "json", 60)
    assert client.hget(store.key("pay", "k"), "r") == b"s" * INLINE
    assert client.hget(store.key("pay", "k"), "x") is None


def test_a_value_past_the_pieces_stays_whole_and_replays(
    store: RedisStore, client: redis.Redis
) -> None:
    """Past PIECES pieces the hash would outgrow hash-max-listpack-entries anyway."""
    huge = b"h" * (INLINE * PIECES + 1)
    claim = store.claim(request("k"))
    store.complete(Ticket.of(claim.record), huge, "json", 60)
    assert client.hget(store.key("pay", "k"), "r") == huge
    assert store.claim(request("k")).record.result == huge
    most = b"m" * (INLINE * PIECES)
    claim = store.claim(request("m"))
    store.complete(Ticket.of(claim.record), most, "json", 60)
    assert encoding(client, store.key("pay", "m")) == "listpack"
    assert store.claim(request("m")).record.result == most


def test_a_long_error_is_cut_and_a_retry_drops_it(store: RedisStore, client: redis.Redis) -> None:
    error = b"e" * 300
    name = store.key("pay", "k")
    claim = store.claim(request("k", max_attempts=3))
    failed = store.fail(Ticket.of(claim.record), error, 60)
    assert encoding(client, name) == "listpack"
    assert client.hget(name, "x") == b"e5"
    assert store.get("pay", "k") == failed
    assert failed.error == error
    # A retry takes the record over: the error (and its pieces) is gone with it.
    retry = store.claim(request("k", max_attempts=3))
    assert retry.outcome is Outcome.ACQUIRED
    assert retry.record.error is None
    assert fields(client, name) == {"s", "f", "o", "lu", "a", "ca", "ua", "ea"}


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


# -- one key: its pieces expire and go with it ----------------------------------------------------
def test_the_record_expires_whole(store: RedisStore, client: redis.Redis, prefix: str) -> None:
    claim = store.claim(request("k", ttl=60))
    done = store.complete(Ticket.of(claim.record), LONG, "json", 5)
    assert done.expires_at is not None
    assert expiry_ms(client, store.key("pay", "k")) == math.ceil(done.expires_at * 1000)
    claim = store.claim(request("f", ttl=None))
    store.complete(Ticket.of(claim.record), LONG, "json", None)
    assert expiry_ms(client, store.key("pay", "f")) == -1
    assert len(keys(client, prefix)) == 2


def test_forget_and_evict_leave_nothing(
    store: RedisStore, client: redis.Redis, prefix: str
) -> None:
    claim = store.claim(request("k"))
    store.complete(Ticket.of(claim.record), LONG, "json", 60)
    assert store.forget("pay", "k")
    # A kept failure with a long error, evicted by an operator.
    claim = store.claim(request("e", max_attempts=1))
    store.fail(Ticket.of(claim.record), b"e" * 300, 60)
    store.resolve("pay", "e", Resolution(None, None, False, None, evict=True))
    assert keys(client, prefix) == set()


def test_resolving_a_long_error_to_a_short_result_drops_the_pieces(
    store: RedisStore, client: redis.Redis
) -> None:
    claim = store.claim(request("k", max_attempts=1))
    store.fail(Ticket.of(claim.record), b"e" * 300, 60)
    settled = store.resolve("pay", "k", Resolution(b"ok", "json", False, 60))
    assert settled.result == b"ok"
    assert settled.error is None
    assert fields(client, store.key("pay", "k")) == {"s", "f", "o", "r", "c", "a", "ca", "ua", "ea"}
    assert store.get("pay", "k") == settled


def test_purge_older_deletes_the_record(
    store: RedisStore, client: redis.Redis, prefix: str
) -> None:
    claim = store.claim(request("k"))
    store.complete(Ticket.of(claim.record), LONG, "json", None)
    assert store.purge_older(0) == 1
    assert keys(client, prefix) == set()


def test_a_copy_replaces_the_pieces(store: RedisStore, client: redis.Redis) -> None:
    name = store.key("pay", "k")
    claim = store.claim(request("k"))
    done = store.complete(Ticket.of(claim.record), LONG, "json", 60)
    later = done.updated_at + 1
    assert store.put(dataclasses.replace(done, result=b"x" * 80, updated_at=later))
    assert client.hget(name, "x") == b"r2"
    assert "3" not in fields(client, name)  # the pieces past the new value's are gone
    assert store.get("pay", "k") == dataclasses.replace(done, result=b"x" * 80, updated_at=later)
    assert store.put(dataclasses.replace(done, result=b"short", updated_at=later + 1))
    assert fields(client, name) == {"s", "f", "o", "r", "c", "a", "ca", "ua", "ea"}
    found = store.get("pay", "k")
    assert found is not None
    assert found.result == b"short"


# -- operator views -------------------------------------------------------------------------------
def test_operator_views_join_the_pieces(store: RedisStore) -> None:
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
    assert {big.key: big.bytes > 2048 for big in survey.biggest} == {"s": True, "u": False}


# -- batches ---------------------------------------------------------------------------------------
def test_batch_completions_cut_long_results_in_pieces(
    store: RedisStore, client: redis.Redis
) -> None:
    reqs = [request(f"b{i}") for i in range(5)]
    claims = store.claim_many(reqs)
    items = [
        Completion(Ticket.of(c.record), LONG + bytes([i]), "json", 60) for i, c in enumerate(claims)
    ]
    done = store.complete_many(items)
    for i in range(5):
        assert encoding(client, store.key("pay", f"b{i}")) == "listpack"
        assert client.hget(store.key("pay", f"b{i}"), "x") == b"r33"
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
        assert store.get("pay", "c0") is None
    finally:
        store.close()
        delete_prefix(client, prefix)
