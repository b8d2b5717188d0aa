"""The Redis store's whole-batch scripts: one claim_many.lua / complete_many.lua call per batch
on a server, one per slot on a cluster, each key answered exactly as its single operation
would, each completion fenced on its own ticket."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest
import redis
from redis.crc import key_slot

from mideng.core.record import ClaimRequest, ExpiryPolicy, Outcome, Record, Status, Ticket
from mideng.errors import LeaseLostError
from mideng.stores.batch import Completion
from mideng.stores.redis import RedisStore, rows
from tests.backends_redis import delete_prefix, expiry_ms
from tests.redis_cluster import Server, cluster
from tests.stores.redis.test_store import Sends


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def prefix() -> str:
    return f"mideng-test-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def own_server() -> Iterator[Server]:
    """A Redis nobody else talks to, so its command counters are ours alone."""
    server = Server().start()
    yield server
    server.cleanup()


@pytest.fixture
def store(own_server: Server, prefix: str) -> Iterator[RedisStore]:
    opened = RedisStore.from_url(own_server.url, prefix=prefix)
    opened.get("warm", "up")  # connects and loads the library
    yield opened
    opened.close()


def req(
    key: str,
    owner: str | None = None,
    lease: float = 30.0,
    fingerprint: str | None = None,
    request_id: str | None = None,
    on_expiry: ExpiryPolicy = ExpiryPolicy.TAKE_OVER,
) -> ClaimRequest:
    return ClaimRequest(
        "batch",
        key,
        owner or uuid.uuid4().hex,
        lease,
        60.0,
        fingerprint,
        on_expiry,
        request_id,
    )


def fcalls(server: Server) -> int:
    stats = redis.Redis(port=server.port).info("commandstats")
    return int(stats.get("cmdstat_fcall", {}).get("calls", 0))


def reset(server: Server) -> None:
    redis.Redis(port=server.port).config_resetstat()


def test_one_call_claims_new_duplicate_in_flight_mismatched_taken_over_and_unknown_keys(
    store: RedisStore, own_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = store.claim(req("done", fingerprint="fp"))
    store.complete(Ticket.of(done.record), b'"ok"', "json", 60.0)
    store.claim(req("held"))
    store.claim(req("lapsed", lease=0.2))
    store.claim(req("printed", fingerprint="one"))
    store.claim(req("unknown", lease=0.2, on_expiry=ExpiryPolicy.UNKNOWN))
    failing = store.claim(req("failed"))
    store.fail(Ticket.of(failing.record), b'{"type": "x:Y", "message": "m", "args": []}', 60.0)
    time.sleep(0.3)
    asked = [
        req("new", fingerprint="fp-new", request_id="rid-1"),
        req("done", fingerprint="fp"),
        req("held"),
        req("lapsed", request_id="rid-2"),
        req("printed", fingerprint="two"),
        req("unknown", on_expiry=ExpiryPolicy.UNKNOWN),
        req("failed"),
        req("new2"),
    ]
    reset(own_server)
    sends = Sends(monkeypatch)
    claims = store.claim_many(asked)
    # One write; one script call, and one more for the request on the unknown policy (other
    # terms: its own call).
    assert (sends.n, fcalls(own_server)) == (1, 2)
    assert [c.outcome for c in claims] == [
        Outcome.ACQUIRED,
        Outcome.REPLAY,
        Outcome.IN_PROGRESS,
        Outcome.ACQUIRED,
        Outcome.MISMATCH,
        Outcome.UNRESOLVED,
        Outcome.REPLAY,
        Outcome.ACQUIRED,
    ]
    # Every record, however compactly it was answered, is exactly what the store now holds.
    for claim, asked_for in zip(claims, asked, strict=True):
        assert claim.record == store.get("batch", asked_for.key), asked_for.key
    new, lapsed = claims[0].record, claims[3].record
    assert (new.fence, new.attempts, new.fingerprint, new.request_id) == (1, 1, "fp-new", "rid-1")
    assert new.created_at == new.updated_at
    assert new.lease_until is not None
    assert (lapsed.fence, lapsed.attempts, lapsed.owner) == (2, 2, asked[3].owner)
    assert lapsed.created_at < lapsed.updated_at
    assert claims[1].record.result == b'"ok"'
    assert claims[5].record.status is Status.UNKNOWN
    assert claims[6].record.status is Status.FAILED


def test_a_batch_completion_fences_each_ticket_on_its_own(
    store: RedisStore, own_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = [req(f"c{i}", lease=0.3 if i == 2 else 30.0, request_id=f"r{i}") for i in range(5)]
    # Keys 0 and 1 first, with another lease: two groups, two calls, still one write.
    reset(own_server)
    sends = Sends(monkeypatch)
    claims = store.claim_many(asked)
    assert (sends.n, fcalls(own_server)) == (1, 2)
    time.sleep(0.4)
    taker = store.claim(req("c2"))  # c2's lease lapsed: taken over by another owner
    assert taker.outcome is Outcome.ACQUIRED
    assert taker.record.fence == 2
    items = [
        Completion(Ticket.of(c.record), f"{i}".encode(), "json", 60.0) for i, c in enumerate(claims)
    ]
    reset(own_server)
    sends.n = 0
    answers = store.complete_many(items)
    assert (sends.n, fcalls(own_server)) == (1, 1)
    lost = answers[2]
    assert isinstance(lost, LeaseLostError)
    assert lost.record is not None
    assert lost.record.owner == taker.record.owner
    for i in (0, 1, 3, 4):
        finished = answers[i]
        assert not isinstance(finished, LeaseLostError)
        assert finished.status is Status.SUCCEEDED
        assert finished.result == f"{i}".encode()
        assert finished == store.get("batch", f"c{i}")  # exactly what is stored
    # The zombie's completion changed nothing; the taker still holds the key and settles it.
    assert store.get("batch", "c2") == taker.record
    assert store.complete(Ticket.of(taker.record), b"t", "json", 60.0).result == b"t"


def stored(server: Server, store: RedisStore, record: Record) -> dict[str, bytes]:
    """The record's hash as the server holds it, after checking it holds nothing else and the
    key expires exactly when the record does."""
    client = redis.Redis(port=server.port)
    name = store.key(record.scope, record.key)
    raw = cast("dict[bytes, bytes]", client.hgetall(name))
    fields = {k.decode(): v for k, v in raw.items()}
    want = {f.name for f in rows.FIELDS if getattr(record, f.attribute) is not None}
    assert set(fields) == want
    ea = record.expires_at
    assert expiry_ms(client, name) == (-1 if ea is None else math.ceil(ea * 1000))
    client.close()
    return fields


@pytest.mark.parametrize("ttl", [60.0, 5.0, None])
def test_a_completion_leaves_exactly_the_finished_record_single_or_batched(
    store: RedisStore, own_server: Server, ttl: float | None
) -> None:
    # The completion writes what a held record gets and drops what it loses (lease, an
    # expiry when the result is kept for ever) without reading the whole record first: the
    # hash must end as the finished record, field for field, its key expiring with it.
    asked = [req(f"f{i}", fingerprint=f"fp{i}", request_id=f"r{i}") for i in range(3)]
    asked += [req("plain"), req("empty", fingerprint="", request_id="")]  # '' is a value
    claims = store.claim_many(asked)
    for claim in claims:
        stored(own_server, store, claim.record)
    single = store.complete(Ticket.of(claims[0].record), b"one", "json", ttl)
    batch = store.complete_many(
        [Completion(Ticket.of(c.record), b"%d" % i, "json", ttl) for i, c in enumerate(claims)][1:]
    )
    for finished in (single, *batch):
        assert not isinstance(finished, LeaseLostError)
        assert finished.status is Status.SUCCEEDED
        assert finished.lease_until is None
        assert (finished.expires_at is None) is (ttl is None)
        assert finished == store.get("batch", finished.key)
        fields = stored(own_server, store, finished)
        assert fields["s"] == b"succeeded"
        assert fields["c"] == b"json"
    assert store.get("batch", "f0") == single
    empty = batch[-1]
    assert not isinstance(empty, LeaseLostError)
    assert empty.fingerprint == ""
    assert empty.request_id == ""
    assert [store.claim(a).outcome for a in asked] == [Outcome.REPLAY] * 5


def test_claims_with_other_terms_go_in_their_own_call_in_the_same_write(
    store: RedisStore, own_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = [
        req("a"),
        ClaimRequest("batch", "b", "o", 30.0, None),  # never expires
        req("c", on_expiry=ExpiryPolicy.UNKNOWN),
        req("d"),
    ]
    reset(own_server)
    sends = Sends(monkeypatch)
    claims = store.claim_many(asked)
    assert (sends.n, fcalls(own_server)) == (1, 3)
    assert [c.record.key for c in claims] == ["a", "b", "c", "d"]
    for claim in claims:
        assert claim.outcome is Outcome.ACQUIRED
        assert claim.record == store.get("batch", claim.record.key)
    assert claims[1].record.expires_at is None
    assert claims[2].record.expires_at is None  # the unknown policy: only resolve ends it
    assert claims[0].record.expires_at is not None


@pytest.mark.anyio
async def test_async_batches_are_one_call_each(
    store: RedisStore, own_server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.aget("warm", "up")
    reset(own_server)
    sends = Sends(monkeypatch)
    claims = await store.aclaim_many([req(f"x{i}") for i in range(50)])
    items = [Completion(Ticket.of(c.record), b"1", "json", 60.0) for c in claims]
    done = await store.acomplete_many(items)
    assert (sends.n, fcalls(own_server)) == (2, 2)
    assert all(not isinstance(d, LeaseLostError) and d.status is Status.SUCCEEDED for d in done)
    again = await store.aclaim_many([req(f"x{i}") for i in range(50)])
    assert {c.outcome for c in again} == {Outcome.REPLAY}
    await store.aclose()


def test_a_server_without_functions_runs_batches_as_scripts(prefix: str) -> None:
    server = Server("--rename-command", "FCALL", "").start()
    try:
        store = RedisStore.from_url(server.url, prefix=prefix)
        claims = store.claim_many([req("s1"), req("s2")])
        done = store.complete_many(
            [Completion(Ticket.of(c.record), b"1", "json", 60) for c in claims]
        )
        assert [d.status for d in done if not isinstance(d, LeaseLostError)] == [
            Status.SUCCEEDED
        ] * 2
        assert [c.outcome for c in store.claim_many([req("s1"), req("s2")])] == [Outcome.REPLAY] * 2
        stats = redis.Redis(port=server.port).info("commandstats")
        assert stats["cmdstat_evalsha"]["calls"] >= 3  # each batch one script call
        store.close()
    finally:
        server.cleanup()


def _sharing_a_slot(store: RedisStore, n: int) -> list[str]:
    """n keys whose records hash to one cluster slot."""
    first = "same0"
    slot = key_slot(store.key("batch", first).encode())
    found, i = [first], 0
    while len(found) < n:
        i += 1
        name = f"same{i}"
        if key_slot(store.key("batch", name).encode()) == slot:
            found.append(name)
    return found


def _cluster_fcalls(client: Any) -> int:
    total = 0
    for stats in client.info("commandstats", target_nodes="primaries").values():
        total += int(stats.get("cmdstat_fcall", {}).get("calls", 0))
    return total


def test_on_a_cluster_each_slot_is_one_call(prefix: str) -> None:
    node = cluster()
    store = RedisStore.from_url(node.url, prefix=prefix)
    client = node.client()
    try:
        store.get("warm", "up")
        same = _sharing_a_slot(store, 3)
        spread = [f"spread{i}" for i in range(12)]
        slots = {key_slot(store.key("batch", k).encode()) for k in spread}
        assert len(slots) == len(spread)  # (checked, not assumed)
        owners = {client.get_node_from_key(store.key("batch", k)).port for k in spread}
        assert len(owners) > 1  # the batch really spans several masters
        done = store.claim(req(spread[0]))
        store.complete(Ticket.of(done.record), b'"ok"', "json", 60.0)
        store.claim(req(same[1]))  # in flight
        keys = same + spread
        client.config_resetstat(target_nodes="primaries")
        claims = store.claim_many([req(k) for k in keys])
        assert _cluster_fcalls(client) == 1 + len(spread)  # the three of one slot together
        assert [c.record.key for c in claims] == keys
        outcomes = [c.outcome for c in claims]
        assert outcomes[1] is Outcome.IN_PROGRESS
        assert outcomes[3] is Outcome.REPLAY
        assert outcomes.count(Outcome.ACQUIRED) == len(keys) - 2
        for claim in claims:
            assert claim.record == store.get("batch", claim.record.key)
        acquired = [c for c in claims if c.outcome is Outcome.ACQUIRED]
        stale = Ticket("batch", same[0], "not-the-owner", 1)
        items = [Completion(Ticket.of(c.record), b"1", "json", 60.0) for c in acquired]
        items[0] = Completion(stale, b"1", "json", 60.0)
        client.config_resetstat(target_nodes="primaries")
        answers = store.complete_many(items)
        assert _cluster_fcalls(client) == 1 + len(spread) - 1  # same[0] and same[2]: one slot
        assert isinstance(answers[0], LeaseLostError)
        untouched = store.get("batch", same[0])
        assert untouched is not None
        assert untouched.status is Status.PROCESSING  # changed nothing
        for answer in answers[1:]:
            assert not isinstance(answer, LeaseLostError)
            assert answer == store.get("batch", answer.key)
    finally:
        store.close()
        delete_prefix(client, prefix)
