"""The status each refusal is answered with, and the key read off a call, without a server."""

from __future__ import annotations

import grpc
import pytest

from mideng.errors import (
    IdempotencyError,
    InProgressError,
    InvalidKeyError,
    PayloadMismatchError,
    StoreUnavailableError,
    UnresolvedError,
)
from mideng.rpc import Method
from mideng.rpc.methods import fingerprinted, key_of, refusal


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (InProgressError("held"), grpc.StatusCode.ABORTED),
        (PayloadMismatchError("other"), grpc.StatusCode.INVALID_ARGUMENT),
        (InvalidKeyError("bad"), grpc.StatusCode.INVALID_ARGUMENT),
        (UnresolvedError("unknown"), grpc.StatusCode.FAILED_PRECONDITION),
        (StoreUnavailableError("down"), grpc.StatusCode.UNAVAILABLE),
    ],
)
def test_each_refusal_has_its_status(error: IdempotencyError, status: grpc.StatusCode) -> None:
    assert refusal(error, Method(), "k")[0] is status


def test_a_method_may_name_its_in_progress_status() -> None:
    rule = Method(in_progress=grpc.StatusCode.UNAVAILABLE)
    assert refusal(InProgressError("held"), rule, "k")[0] is grpc.StatusCode.UNAVAILABLE


class Request:
    def __init__(self, request_id: object) -> None:
        self.request_id = request_id


def test_the_key_is_read_from_its_field_or_its_metadata() -> None:
    assert key_of(Method(), Request("r-1"), ()) == "r-1"
    assert key_of(Method(), Request(""), ()) is None
    with pytest.raises(InvalidKeyError):
        key_of(Method(), Request(7), ())
    rule = Method(metadata="idempotency-key")
    assert key_of(rule, Request("ignored"), (("idempotency-key", "m-1"),)) == "m-1"
    assert key_of(rule, Request("ignored"), (("other", "x"),)) is None


def test_a_request_that_is_not_a_message_is_fingerprinted_as_it_is() -> None:
    assert fingerprinted({"a": 1}) == {"a": 1}
