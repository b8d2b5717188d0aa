"""A process of key layout 1 still running beside layout 2 (a rolling deploy): it reads only a
record's own fields, so a value layout 2 cut into pieces must not look to it like a record
without one. layout_1/claim.lua is layout 1's claim as that release ran it; its reply is read
as that release read it (rows.decode and the Guard's Call.next, unchanged since)."""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
import redis

from mideng.core.flow import Action, Call
from mideng.core.record import Claim, ClaimRequest, Outcome, Status, Ticket
from mideng.errors import CodecError, RecordedFailureError
from mideng.stores.redis import RedisStore
from mideng.stores.redis.commands import OUTCOMES
from mideng.stores.redis.rows import IN_PIECES, decode, joined, row
from tests.backends_redis import own_prefix

LAYOUT_1_CLAIM = (Path(__file__).parent / "layout_1" / "claim.lua").read_text("utf-8")


@pytest.fixture
def opened() -> Iterator[tuple[RedisStore, redis.Redis]]:
    with own_prefix("beside") as pair:
        yield pair


def request(key: str, max_attempts: int = 1) -> ClaimRequest:
    return ClaimRequest("pay", key, uuid.uuid4().hex, 30.0, 60.0, max_attempts=max_attempts)


def layout_1_claim(client: redis.Redis, store: RedisStore, req: ClaimRequest) -> Claim:
    """req claimed by a layout-1 process: its Lua, its arguments, its reply's decoding."""
    args = (req.owner, repr(req.lease), repr(req.ttl), "", "t", "", str(req.max_attempts))
    reply = client.eval(LAYOUT_1_CLAIM, 1, store.key(req.scope, req.key), *args)
    code, _, record = decode(req.scope, req.key, reply)
    assert record is not None
    return Claim(OUTCOMES[code], record)


def guard_of(req: ClaimRequest) -> Call:
    return Call(req.scope, req.key, req.owner, req.lease, req.ttl, max_attempts=req.max_attempts)


@pytest.mark.parametrize(
    ("codec", "result"),
    [("json", b'"' + b"j" * 98 + b'"'), ("pickle", pickle.dumps("p" * 2000))],
)
def test_a_cut_result_is_no_empty_replay_to_layout_1(
    opened: tuple[RedisStore, redis.Redis], codec: str, result: bytes
) -> None:
    store, client = opened
    claim = store.claim(request("k"))
    store.complete(Ticket.of(claim.record), result, codec, 60)
    req = request("k")
    old = layout_1_claim(client, store, req)
    assert old.outcome is Outcome.REPLAY
    assert old.record.status is Status.SUCCEEDED
    assert old.record.result == IN_PIECES  # not None, not b""
    call = guard_of(req)
    with pytest.raises(CodecError):
        call.next(old)
    # Nothing was lost: layout 2 still replays the whole result.
    again = store.claim(request("k"))
    assert again.outcome is Outcome.REPLAY
    assert again.record.result == result


def test_a_cut_error_is_a_recorded_failure_to_layout_1_not_a_run(
    opened: tuple[RedisStore, redis.Redis],
) -> None:
    store, client = opened
    error = b'{"type":"builtins:ValueError","message":"' + b"e" * 200 + b'"}'
    claim = store.claim(request("k"))
    store.fail(Ticket.of(claim.record), error, 60)
    req = request("k")
    old = layout_1_claim(client, store, req)
    assert old.outcome is Outcome.REPLAY  # without the stand-in: ACQUIRED, the body run again
    assert old.record.error == IN_PIECES
    call = guard_of(req)
    assert call.next(old) is Action.RAISE
    assert isinstance(call.error, RecordedFailureError)
    assert store.claim(request("k")).record.error == error


def test_layout_1_retrying_a_cut_error_leaves_pieces_layout_2_does_not_read(
    opened: tuple[RedisStore, redis.Redis],
) -> None:
    store, client = opened
    """A failure with attempts left is run again by either layout; layout 1 drops the error's
    field and leaves the pieces, which layout 2 must then take for stale, not for an error."""
    name = store.key("pay", "k")
    claim = store.claim(request("k", max_attempts=3))
    store.fail(Ticket.of(claim.record), b"e" * 300, 60)
    retry = layout_1_claim(client, store, request("k", max_attempts=3))
    assert retry.outcome is Outcome.ACQUIRED
    assert client.hget(name, "x") == b"e5"  # stale now
    held = store.get("pay", "k")
    assert held is not None
    assert held.status is Status.PROCESSING
    assert held.error is None
    fields = cast(dict[bytes, bytes], client.hgetall(name))
    assert row("pay", "k", joined(fields)) == held
    done = store.complete(Ticket.of(retry.record), b"d" * 100, "json", 60)
    assert done.error is None
    assert store.get("pay", "k") == done
    assert client.hget(name, "e") is None
    assert client.hget(name, "x") == b"r2"
    assert client.hget(name, "5") is None
