"""An application's own codec that breaks the protocol still loses nothing and runs nothing twice.

The protocol asks a codec's ``encode`` to raise CodecError for a value it can't store. One that
raised anything else (a ValueError from a serialiser, say) used to escape the Guard with the
claim still held: the record stayed processing until its lease ran out, and the next retry took
it over and ran the body a second time. Each test fails on that code: the body runs twice, or a
duplicate finds a processing record instead of the recorded failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from mideng import Guard
from mideng.core.codec import JSON_CODEC, CheckedCodec, checked, get_codec, register_codec
from mideng.core.record import Status
from mideng.errors import CodecError, ConfigurationError
from mideng.observability import metrics
from mideng.stores.base import Store
from mideng.stores.memory import MemoryStore
from mideng.stores.sqlite import SQLiteStore


class Broken:
    """Encodes with ``encode`` (a function of the value), decodes as JSON unless told to fail."""

    def __init__(self, name: str, encode: Callable[[Any], Any], decode_fails: bool = False):
        self.name = name
        self._encode = encode
        self._decode_fails = decode_fails

    def encode(self, value: Any) -> Any:
        return self._encode(value)

    def decode(self, data: bytes, type_hint: Any = None) -> Any:
        if self._decode_fails:
            raise KeyError("no such schema")
        return JSON_CODEC.decode(data, type_hint)


def _raises(value: Any) -> bytes:
    raise ValueError(f"can't serialise {value!r}")


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    made: Store = (
        MemoryStore() if request.param == "memory" else SQLiteStore(str(tmp_path / "c.db"))
    )
    yield made
    made.close()


@pytest.fixture(params=["plain", "metered"])
def loop_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    """The Guard's plain loop, and the metered one metrics switch in (each handles codecs)."""
    if request.param == "metered":
        metrics.enable(CollectorRegistry())
    yield request.param
    if request.param == "metered":
        metrics.disable()


class Body:
    def __init__(self) -> None:
        self.runs = 0

    def __call__(self) -> dict[str, int]:
        self.runs += 1
        return {"charged": 100}

    async def run_async(self) -> dict[str, int]:
        await asyncio.sleep(0)
        return self()


def test_an_encode_error_is_recorded_and_never_runs_the_body_again(
    store: Store, loop_kind: str
) -> None:
    guard = Guard(store, codec=Broken("raises", _raises))
    body = Body()
    with pytest.raises(CodecError, match=r"raises.*can.t serialise") as first:
        guard.run("pay", "k1", body)
    assert isinstance(first.value.__cause__, ValueError)
    record = guard.get("pay", "k1")
    assert record is not None
    assert record.status is Status.FAILED
    with pytest.raises(CodecError, match="can't serialise"):
        guard.run("pay", "k1", body)
    assert body.runs == 1


def test_an_encode_error_in_arun_is_recorded_too(store: Store, loop_kind: str) -> None:
    guard = Guard(store, codec=Broken("raises", _raises))
    body = Body()

    async def twice() -> None:
        for _ in range(2):
            with pytest.raises(CodecError, match="can't serialise"):
                await guard.arun("pay", "k2", body.run_async)

    asyncio.run(twice())
    record = guard.get("pay", "k2")
    assert record is not None
    assert record.status is Status.FAILED
    assert body.runs == 1


def test_an_encoding_that_is_not_bytes_is_refused_and_recorded(store: Store) -> None:
    guard = Guard(store, codec=Broken("text", lambda v: '{"charged":100}'))
    body = Body()
    for _ in range(2):
        with pytest.raises(CodecError, match="'text' encoded a str, not bytes"):
            guard.run("pay", "k3", body)
    assert body.runs == 1


def test_a_bytearray_encoding_is_stored_as_bytes_and_replayed(store: Store) -> None:
    guard = Guard(store, codec=Broken("array", lambda v: bytearray(JSON_CODEC.encode(v))))
    body = Body()
    assert guard.run("pay", "k4", body) == {"charged": 100}
    assert guard.run("pay", "k4", body) == {"charged": 100}
    record = guard.get("pay", "k4")
    assert record is not None
    assert type(record.result) is bytes
    assert body.runs == 1


def test_a_decode_error_on_a_replay_is_a_codec_error_and_runs_nothing(store: Store) -> None:
    writer = Guard(store, codec=Broken("schema", JSON_CODEC.encode))
    body = Body()
    assert writer.run("pay", "k5", body) == {"charged": 100}
    reader = Guard(store, codec=Broken("schema", JSON_CODEC.encode, decode_fails=True))
    with pytest.raises(CodecError, match="'schema' failed to decode") as replay:
        reader.run("pay", "k5", body)
    assert isinstance(replay.value.__cause__, KeyError)
    assert body.runs == 1


def test_a_registered_codec_is_held_to_the_protocol_by_its_name(store: Store) -> None:
    register_codec(Broken("registered-raises", _raises))
    guard = Guard(store, codec="registered-raises")
    body = Body()
    for _ in range(2):
        with pytest.raises(CodecError, match="registered-raises"):
            guard.run("pay", "k6", body)
    assert body.runs == 1


def test_mideng_codecs_are_used_as_they_are_and_others_wrapped_once() -> None:
    assert get_codec("json") is JSON_CODEC
    assert checked(JSON_CODEC) is JSON_CODEC
    wrapped = get_codec(Broken("mine", JSON_CODEC.encode))
    assert type(wrapped) is CheckedCodec
    assert wrapped.name == "mine"
    assert checked(wrapped) is wrapped


@pytest.mark.parametrize("name", [None, "", 7])
def test_a_codec_without_a_name_is_refused_when_configured(name: Any) -> None:
    codec = Broken("x", JSON_CODEC.encode)
    codec.name = name
    with pytest.raises(ConfigurationError, match="needs a name"):
        Guard(MemoryStore(), codec=codec)
