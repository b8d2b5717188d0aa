"""A record as a Redis hash is defined once, in rows.FIELDS; the Lua cannot drift from it."""

from __future__ import annotations

import re
import uuid
from importlib import resources
from typing import cast

import redis

from mideng.core.record import RECORD_FIELDS, Record, Status
from mideng.stores.redis import RedisStore, rows, scripts
from tests.backends_redis import delete_prefix
from tests.services import REDIS_URL, need

LUA = resources.files("mideng.stores.redis").joinpath("lua")


def lua_sources() -> dict[str, str]:
    return {f.name: f.read_text("utf-8") for f in LUA.iterdir() if f.name.endswith(".lua")}


def test_every_record_attribute_is_one_field() -> None:
    assert sorted(f.attribute for f in rows.FIELDS) == sorted(set(RECORD_FIELDS) - {"scope", "key"})
    assert len(set(rows.NAMES)) == len(rows.NAMES)


def test_the_loaded_lua_declares_the_python_fields_in_their_order() -> None:
    head = scripts.Scripts.load().head
    listed = re.search(r"^local FIELDS = \{(.*)\}$", head, re.M)
    assert listed is not None
    assert re.findall(r"'(\w+)'", listed.group(1)) == list(rows.NAMES)
    numbered = re.search(r"^local ([A-Z, ]+) = ([\d, ]+)$", head, re.M)
    assert numbered is not None
    constants = numbered.group(1).split(", ")
    positions = [int(p) for p in numbered.group(2).split(", ")]
    assert constants == [name.upper() for name in rows.NAMES]
    assert positions == list(range(1, len(rows.NAMES) + 1))
    assert f"local NFIELDS = {len(rows.NAMES)}\n" in head
    cut = f"local X, XNAME, INLINE, PIECES = {len(rows.NAMES) + 1}, '{rows.CUT}', {rows.INLINE}, "
    assert f"{cut}{rows.PIECES}\n" in head
    assert rows.LUA_MARK not in head


def test_no_lua_file_spells_the_fields_again() -> None:
    sources = lua_sources()
    assert sources["record.lua"].count(rows.LUA_MARK) == 1
    declared = {name.upper() for name in (*rows.NAMES, rows.CUT)}  # the fields, and CUT's X
    count = re.compile(rf"(?<![\w.]){len(rows.NAMES)}(?![\w.])")
    for name, text in sources.items():
        code = "\n".join(line.partition("--")[0] for line in text.splitlines())
        assert "FIELDS =" not in code, name
        assert not count.search(code), f"{name} spells the number of fields"
        # A field is only ever named by its constant, and every constant is a field.
        used = set(re.findall(r"\[([A-Z]+)\]", code))
        assert used <= declared, f"{name} uses {used - declared}"


def stored(args: list[str | bytes]) -> list[bytes | None]:
    """What put.lua's opt() leaves of each argument, as an HMGET gives it back."""
    out: list[bytes | None] = []
    for arg in args:
        raw = arg if isinstance(arg, bytes) else arg.encode()
        out.append(None if raw == b"" else raw[1:])
    return out


def sample() -> Record:
    return Record(
        scope="pay",
        key="r1",
        status=Status.FAILED,
        fence=3,
        owner="holder",
        fingerprint="",
        lease_until=None,
        result=None,
        codec="json",
        error=b"declined",
        attempts=2,
        request_id="req-1",
        created_at=1700000000.123456,
        updated_at=1700000001.5,
        expires_at=1700086401.5,
    )


def test_what_put_writes_row_reads_back() -> None:
    record = sample()
    assert rows.row("pay", "r1", stored(rows.put_args(record))) == record
    # A record that vanished between SCAN and HMGET is no record.
    assert rows.row("pay", "r1", [None] * len(rows.NAMES)) is None


def test_the_server_keeps_a_record_as_rows_says() -> None:
    need("redis")
    prefix = f"mideng-test-{uuid.uuid4().hex[:10]}"
    store = RedisStore.from_url(REDIS_URL, prefix=prefix)
    record = sample()
    record.expires_at = None
    assert store.put(record) is True
    client = redis.Redis.from_url(REDIS_URL)
    fields = cast("list[bytes | None]", client.hmget(store.key("pay", "r1"), rows.NAMES))
    assert rows.row("pay", "r1", fields) == record
    assert store.get("pay", "r1") == record
    client.close()
    store.close()
    delete_prefix(redis.Redis.from_url(REDIS_URL), prefix)
