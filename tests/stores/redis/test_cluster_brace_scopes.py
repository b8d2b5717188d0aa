"""Scopes with braces on a Redis Cluster: a record and the keys beside it share one slot.

The record key is ``{prefix}:{scope:key}`` and the keys beside it (tokens, debounce windows,
an operation's steps) repeat the hash tag. Redis hashes the text between the first ``{`` and
the first ``}`` after it, unless that text is empty: then it hashes the whole key name, and
the keys beside the record land in other slots. A scope that starts with ``}`` must not make
that empty tag, or every operation touching two keys fails with CROSSSLOT.
"""

from __future__ import annotations

import time
import uuid

import pytest

from mideng.core.record import ClaimRequest, Ticket
from mideng.stores.redis import RedisStore
from mideng.stores.redis.commands import Commands
from mideng.stores.redis.scripts import scripts
from tests.backends_redis import delete_prefix
from tests.redis_cluster import cluster


@pytest.mark.parametrize("scope", ["}orders", "}", "}{", "a}b", "{x}", "}:\\"])
def test_a_record_and_its_side_keys_share_a_hash_tag(scope: str) -> None:
    import redis.crc

    commands = Commands("p", scripts())
    record = commands.key(scope, "k")
    slot = redis.crc.key_slot(record.encode())
    for kind in ("token", "hit", "steps"):
        assert redis.crc.key_slot(commands.side_key(kind, scope, "k").encode()) == slot
    # The record's key still names its scope and key.
    assert commands.identity(record.encode()) == (scope, "k")


def test_steps_of_a_scope_starting_with_a_brace_on_a_cluster() -> None:
    prefix = f"brace-{uuid.uuid4().hex[:8]}"
    store = RedisStore.from_url(cluster().url, prefix=prefix)
    assert isinstance(store, RedisStore)
    try:
        scope = "}orders"
        claim = store.claim(ClaimRequest(scope, "o1", uuid.uuid4().hex, 30.0, 60.0))
        assert claim.acquired
        owner = claim.record.owner
        assert store.begin_steps(scope, "o1", owner, b"{}", "json") == {}
        store.record_step(scope, "o1", owner, "charge", b'"ok"', "json")
        assert set(store.begin_steps(scope, "o1", owner, b"{}", "json")) == {"charge"}
        store.complete(Ticket.of(claim.record), b"1", "json", 60.0)
        # The scan for stuck records still finds this scope's keys.
        stuck = store.claim(ClaimRequest(scope, "o2", uuid.uuid4().hex, 0.001, 60.0))
        time.sleep(0.05)
        assert [r.key for r in store.unresolved(scope)] == ["o2"]
        assert stuck.acquired
    finally:
        delete_prefix(cluster().client(), prefix)
        store.close()
