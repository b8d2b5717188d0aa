"""Key layout 2 writes a record's times as whole epoch microseconds (a listpack entry of 10
bytes, where layout 1's seconds text took 19); a time layout 1 wrote is read as it is."""

from __future__ import annotations

import dataclasses
import math
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from mideng.core.record import ClaimRequest, Outcome, Ticket
from mideng.stores.redis import RedisStore
from tests.backends_redis import own_prefix


@pytest.fixture
def opened() -> Iterator[tuple[RedisStore, redis.Redis]]:
    with own_prefix("times") as pair:
        yield pair


def request(key: str) -> ClaimRequest:
    return ClaimRequest("pay", key, uuid.uuid4().hex, 30.0, 60.0)


def raw(client: redis.Redis, name: str, field: str) -> bytes:
    value = client.hget(name, field)
    assert isinstance(value, bytes)
    return value


def test_times_are_whole_microseconds(opened: tuple[RedisStore, redis.Redis]) -> None:
    store, client = opened
    name = store.key("pay", "k")
    claim = store.claim(request("k"))
    lu = raw(client, name, "lu")
    assert lu.isdigit()
    assert claim.record.lease_until == int(lu) / 1_000_000
    done = store.complete(Ticket.of(claim.record), b"1", "json", 60)
    for field, value in (("ca", done.created_at), ("ua", done.updated_at), ("ea", done.expires_at)):
        stored = raw(client, name, field)
        assert stored.isdigit()
        assert value == int(stored) / 1_000_000
    assert store.get("pay", "k") == done
    # The key goes at the first millisecond the record is expired in.
    assert client.pexpiretime(name) == math.ceil(int(raw(client, name, "ea")) / 1000)


def layout_1(
    client: redis.Redis, name: str, created: float, lease_until: float, expires_at: float
) -> None:
    """A processing record as layout 1 wrote it: its times in seconds, '%.6f'."""
    client.hset(
        name,
        mapping={
            "s": "processing",
            "f": "1",
            "o": "old-owner",
            "a": "1",
            "lu": f"{lease_until:.6f}",
            "ca": f"{created:.6f}",
            "ua": f"{created:.6f}",
            "ea": f"{expires_at:.6f}",
        },
    )


def test_a_layout_1_lease_is_read_in_seconds(opened: tuple[RedisStore, redis.Redis]) -> None:
    store, client = opened
    now = time.time()
    live, lapsed = store.key("pay", "live"), store.key("pay", "lapsed")
    layout_1(client, live, now - 5, now + 60, now + 120)
    layout_1(client, lapsed, now - 5, now - 1, now + 120)
    held = store.claim(request("live"))
    assert held.outcome is Outcome.IN_PROGRESS
    assert held.record.lease_until == float(f"{now + 60:.6f}")
    taken = store.claim(request("lapsed"))
    assert taken.outcome is Outcome.ACQUIRED
    assert taken.record.fence == 2
    # Its creation time stays as layout 1 wrote it; what the take-over wrote is in microseconds.
    assert raw(client, lapsed, "ca") == f"{now - 5:.6f}".encode()
    assert raw(client, lapsed, "ua").isdigit()
    assert store.get("pay", "lapsed") == taken.record


def test_a_layout_1_expiry_past_is_expired(opened: tuple[RedisStore, redis.Redis]) -> None:
    store, client = opened
    now = time.time()
    layout_1(client, store.key("pay", "k"), now - 5, now + 60, now - 1)
    assert store.get("pay", "k") is None
    assert store.claim(request("k")).outcome is Outcome.ACQUIRED


def test_a_copy_keeps_a_time_finer_than_a_microsecond(
    opened: tuple[RedisStore, redis.Redis],
) -> None:
    store, client = opened
    claim = store.claim(request("k"))
    done = store.complete(Ticket.of(claim.record), b"1", "json", 60)
    store.forget("pay", "k")
    fine = dataclasses.replace(done, updated_at=math.nextafter(done.updated_at, math.inf))
    assert store.put(fine)
    name = store.key("pay", "k")
    assert raw(client, name, "ca").isdigit()  # a whole number of microseconds: as the scripts
    assert not raw(client, name, "ua").isdigit()
    assert store.get("pay", "k") == fine
