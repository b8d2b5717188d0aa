"""What the contract suite can't see: the Lua protocol, key layout, TTLs, clocks, topologies."""

from __future__ import annotations

import asyncio
import math
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio.connection

from mideng import Guard, open_store
from mideng.core.record import ClaimRequest, ExpiryPolicy, Outcome, Resolution, Status, Ticket
from mideng.errors import ConfigurationError, StoreUnavailableError
from mideng.stores.redis import RedisStore, direct
from mideng.stores.redis import scripts as redis_scripts
from mideng.stores.redis.connect import parse, redact
from tests.backends_redis import delete_prefix, expiry_ms
from tests.redis_cluster import Server, cluster
from tests.services import REDIS_URL, need


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def prefix() -> str:
    return f"mideng-test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def store(prefix: str) -> Iterator[RedisStore]:
    need("redis")
    opened = RedisStore.from_url(REDIS_URL, prefix=prefix)
    yield opened
    opened.close()
    delete_prefix(redis.Redis.from_url(REDIS_URL), prefix)


@pytest.fixture(scope="module")
def own_server() -> Iterator[Server]:
    """A Redis nobody else talks to, so its command counters are ours alone."""
    server = Server().start()
    yield server
    server.cleanup()


def request(
    scope: str = "pay",
    key: str = "k",
    lease: float = 30.0,
    ttl: float | None = 60.0,
    fingerprint: str | None = None,
    on_expiry: ExpiryPolicy = ExpiryPolicy.TAKE_OVER,
) -> ClaimRequest:
    return ClaimRequest(scope, key, uuid.uuid4().hex, lease, ttl, fingerprint, on_expiry)


# -- one round trip -------------------------------------------------------------------------------
class Sends:
    """Counts what is written to the sockets (a pipeline counts once: one round trip): by
    redis-py, and by the async direct sender, which writes to the stream itself."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.n = 0
        self.direct = False  # inside the direct sender's write: its fallback is not counted again
        for cls in (
            redis.connection.AbstractConnection,
            redis.asyncio.connection.AbstractConnection,
        ):
            original = cls.send_packed_command
            monkeypatch.setattr(cls, "send_packed_command", self._counting(original))
        write = direct._send

        async def direct_send(conn: Any, command: list[bytes]) -> None:
            self.n += 1
            self.direct = True
            try:
                await write(conn, command)
            finally:
                self.direct = False

        monkeypatch.setattr(direct, "_send", direct_send)

    def _counting(self, original: Any) -> Any:
        def send(conn: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.direct:
                self.n += 1
            return original(conn, *args, **kwargs)

        return send


def test_each_operation_is_one_round_trip(
    own_server: Server, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RedisStore.from_url(own_server.url, prefix=prefix)
    store.claim(request(key="warm"))  # connects and loads the script
    sends = Sends(monkeypatch)
    direct = redis.Redis(port=own_server.port)
    direct.config_resetstat()
    sends.n = 0

    claim = store.claim(request(key="k1"))
    assert claim.outcome is Outcome.ACQUIRED
    assert sends.n == 1
    assert direct.info("commandstats")["cmdstat_fcall"]["calls"] == 1

    sends.n = 0
    store.complete(Ticket.of(claim.record), b'"ok"', "json", 60)
    assert sends.n == 1
    sends.n = 0
    again = store.claim(request(key="k1"))
    assert again.outcome is Outcome.REPLAY
    assert again.record.result == b'"ok"'
    assert sends.n == 1
    store.close()
    direct.close()


@pytest.mark.anyio
async def test_async_claim_is_one_round_trip(
    own_server: Server, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RedisStore.from_url(own_server.url, prefix=prefix)
    await store.aclaim(request(key="warm"))
    sends = Sends(monkeypatch)
    claim = await store.aclaim(request(key="k1"))
    assert claim.outcome is Outcome.ACQUIRED
    assert sends.n == 1
    sends.n = 0
    await store.acomplete(Ticket.of(claim.record), b"1", "json", 60)
    assert (await store.aclaim(request(key="k1"))).outcome is Outcome.REPLAY
    assert sends.n == 2
    await store.aclose()


def test_lost_script_cache_is_reloaded(own_server: Server, prefix: str) -> None:
    store = RedisStore.from_url(own_server.url, prefix=prefix)
    first = store.claim(request(key="s1"))
    redis.Redis(port=own_server.port).script_flush()
    assert store.claim(request(key="s1")).outcome is Outcome.IN_PROGRESS
    assert store.get("pay", "s1") == first.record
    store.close()


def test_lost_function_library_is_reloaded(own_server: Server, prefix: str) -> None:
    store = RedisStore.from_url(own_server.url, prefix=prefix)
    first = store.claim(request(key="f1"))
    direct = redis.Redis(port=own_server.port)
    direct.function_flush()
    assert store.claim(request(key="f1")).outcome is Outcome.IN_PROGRESS
    assert store.get("pay", "f1") == first.record
    libraries = [
        dict(zip(lib[::2], lib[1::2], strict=True))[b"library_name"]
        for lib in direct.function_list()
    ]
    assert libraries == [store.commands.scripts.library.split("\n")[0].split("=")[1].encode()]
    store.close()
    direct.close()


def test_a_server_without_functions_gets_scripts() -> None:
    # Redis 6 has no FCALL; a server with the command renamed away answers the same way.
    server = Server("--rename-command", "FCALL", "").start()
    try:
        store = RedisStore.from_url(server.url, prefix="old")
        guard = Guard(store)
        assert guard.run("pay", "r6", lambda: {"ok": 1}) == {"ok": 1}
        assert guard.run("pay", "r6", lambda: {"ok": 2}) == {"ok": 1}
        stats = redis.Redis(port=server.port).info("commandstats")
        assert stats["cmdstat_evalsha"]["calls"] >= 3  # claim, complete, claim
        store.close()
    finally:
        server.cleanup()


def test_operations_are_package_data_with_one_shared_head() -> None:
    scripts = redis_scripts.Scripts.load()
    head = scripts.head
    assert head.startswith("-- The head of every operation")
    names = set()
    for script in scripts.all():
        assert script.text.startswith(head)
        assert len(script.sha) == 40
        names.add(script.function)
        # The library holds each operation once, as a function over the same text.
        assert script.text[len(head) :] in scripts.library
        assert f"redis.register_function('{script.function}'" in scripts.library
    assert len(names) == len(scripts.all()) == 14
    assert scripts.library.startswith("#!lua name=mideng_")
    # The head (its helpers) is defined once for all functions.
    assert scripts.library.count("local function reply(") == 1
    # So are the claim and completion rules the single and the batch operations share.
    assert scripts.library.count("local function claim(") == 1
    assert scripts.library.count("local function complete(") == 1


# -- keys and slots -------------------------------------------------------------------------------
def test_a_record_and_its_tokens_share_one_slot(store: RedisStore) -> None:
    from redis.crc import key_slot

    pairs = [("pay", "T1"), ("a:b", "c:d"), ("we{ird", "k}ey"), ("s", "{x}"), ("a\\", ":b")]
    for scope, key in pairs:
        record_key = store.key(scope, key)
        slots = {
            key_slot(record_key.encode()),
            key_slot(store.commands.side_key("token", scope, key).encode()),
            key_slot(store.commands.side_key("hit", scope, key).encode()),
        }
        assert len(slots) == 1, (scope, key)
        assert store.commands.identity(record_key.encode()) == (scope, key)
    # The first unescaped ':' ends the scope: these two records are different keys.
    assert store.key("a:b", "c") != store.key("a", "b:c")
    assert store.key("a\\", "b") != store.key("a", "\\b")


def test_scopes_with_colons_do_not_collide(store: RedisStore) -> None:
    guard = Guard(store)
    assert guard.run("a:b", "c", lambda: 1) == 1
    assert guard.run("a", "b:c", lambda: 2) == 2
    assert [r.scope for r in store.unresolved()] == []


# -- TTLs follow expires_at -----------------------------------------------------------------------
def test_key_ttl_follows_the_record(store: RedisStore) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    claim = store.claim(request(key="t1", lease=10, ttl=60))
    name = store.key("pay", "t1")
    assert claim.record.expires_at is not None
    assert expiry_ms(client, name) == math.ceil(claim.record.expires_at * 1000)

    beat = store.heartbeat(Ticket.of(claim.record), 20, 60)
    assert beat.expires_at is not None
    assert expiry_ms(client, name) == math.ceil(beat.expires_at * 1000)

    done = store.complete(Ticket.of(claim.record), b"1", "json", 5)
    assert done.expires_at is not None
    assert expiry_ms(client, name) == math.ceil(done.expires_at * 1000)

    forever = store.claim(request(key="t2", ttl=None))
    assert forever.record.expires_at is None
    assert expiry_ms(client, store.key("pay", "t2")) == -1
    kept = store.complete(Ticket.of(forever.record), b"1", "json", None)
    assert kept.expires_at is None
    assert expiry_ms(client, store.key("pay", "t2")) == -1
    client.close()


def test_processing_under_unknown_policy_has_no_ttl(store: RedisStore) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    claim = store.claim(request("charge", "c1", lease=0.2, ttl=60, on_expiry=ExpiryPolicy.UNKNOWN))
    assert claim.record.expires_at is None
    assert expiry_ms(client, store.key("charge", "c1")) == -1
    time.sleep(0.3)
    late = store.claim(request("charge", "c1", on_expiry=ExpiryPolicy.UNKNOWN))
    assert late.outcome is Outcome.UNRESOLVED
    assert late.record.status is Status.UNKNOWN
    assert expiry_ms(client, store.key("charge", "c1")) == -1
    settled = store.resolve("charge", "c1", Resolution(b"1", "json", False, 30))
    assert settled.expires_at is not None
    assert expiry_ms(client, store.key("charge", "c1")) == math.ceil(settled.expires_at * 1000)
    client.close()


def test_the_store_clock_decides_not_the_clients(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    sec, usec = client.time()
    before = sec + usec / 1e6
    # A client whose clock is a day off changes nothing: every time comes from Redis TIME.
    monkeypatch.setattr(time, "time", lambda: before - 86400)
    claim = store.claim(request(key="clock", lease=5, ttl=10))
    sec, usec = client.time()
    after = sec + usec / 1e6
    record = claim.record
    assert before <= record.created_at == record.updated_at <= after
    assert record.lease_until == pytest.approx(record.created_at + 5, abs=1e-5)
    assert record.expires_at == pytest.approx(record.created_at + 15, abs=1e-5)
    client.close()


def test_records_decode_exactly(store: RedisStore) -> None:
    claim = store.claim(
        ClaimRequest("pay", "exact", "owner-1", 30, 60, "", ExpiryPolicy.TAKE_OVER, "")
    )
    assert claim.record.fingerprint == ""
    assert claim.record.request_id == ""
    blob = bytes(range(256))
    done = store.complete(Ticket.of(claim.record), blob, "pickle", 60)
    assert done.result == blob
    got = store.get("pay", "exact")
    assert got == done
    assert isinstance(got.created_at, float)
    assert got.fence == 1
    assert got.attempts == 1


# -- operator views -------------------------------------------------------------------------------
def test_unresolved_filters_by_scope_even_with_glob_characters(store: RedisStore) -> None:
    for scope in ("ch*rge", "charge", "ch?rge"):
        store.claim(request(scope, "x", lease=0.2, on_expiry=ExpiryPolicy.UNKNOWN))
    store.claim(request("live", "y", lease=30))
    time.sleep(0.3)
    assert [r.scope for r in store.unresolved("ch*rge")] == ["ch*rge"]
    assert {r.scope for r in store.unresolved()} == {"ch*rge", "charge", "ch?rge"}
    assert len(store.unresolved(limit=2)) == 2
    assert store.purge() == 0
    assert store.self_expiring is True


def test_unresolved_scans_every_cluster_node(prefix: str) -> None:
    node = cluster()
    store = RedisStore.from_url(node.url, prefix=prefix)
    client = node.client()
    try:
        keys = [f"k{i}" for i in range(30)]
        for key in keys:
            store.claim(request("job", key, lease=0.2))
        owners = {client.get_node_from_key(store.key("job", k)).port for k in keys}
        assert len(owners) > 1  # the records really live on several masters
        time.sleep(0.3)
        assert sorted(r.key for r in store.unresolved("job", limit=100)) == sorted(keys)
    finally:
        store.close()
        delete_prefix(client, prefix)


@pytest.mark.anyio
async def test_async_operator_views(store: RedisStore) -> None:
    await store.aclaim(request("charge", "c9", lease=0.2, on_expiry=ExpiryPolicy.UNKNOWN))
    await asyncio.sleep(0.3)
    assert [r.key for r in await store.aunresolved("charge")] == ["c9"]
    settled = await store.aresolve("charge", "c9", Resolution(None, None, True, 60))
    assert settled.status is Status.FAILED
    assert await store.aunresolved("charge") == []
    assert await store.apurge() == 0
    await store.aclose()


# -- URLs and topologies --------------------------------------------------------------------------
def test_cluster_urls() -> None:
    target, own = parse(
        "redis+cluster://u:p%40ss@10.0.0.1:7000,10.0.0.2,[::1]:7002"
        "?prefix=app&socket_timeout=0.5&max_connections=7",
        {},
    )
    assert target.kind == "cluster"
    assert target.nodes == (("10.0.0.1", 7000), ("10.0.0.2", 6379), ("::1", 7002))
    assert target.kwargs["username"] == "u"
    assert target.kwargs["password"] == "p@ss"
    assert target.kwargs["socket_timeout"] == 0.5
    assert target.kwargs["max_connections"] == 7
    assert own == {"prefix": "app"}
    assert parse("rediss+cluster://h:1", {})[0].ssl is True
    with pytest.raises(ConfigurationError, match="no databases"):
        parse("redis+cluster://h:1/2", {})
    with pytest.raises(ConfigurationError, match="bad node"):
        parse("redis+cluster://h:port", {})


def test_sentinel_urls() -> None:
    target, own = parse(
        "redis+sentinel://:secret@s1:26380,s2/mymaster/3?sentinel_password=sp&retries=2",
        {"prefix": "p", "socket_timeout": 1},
    )
    assert target.kind == "sentinel"
    assert target.nodes == (("s1", 26380), ("s2", 26379))
    assert target.service == "mymaster"
    assert target.kwargs["db"] == 3
    assert target.kwargs["password"] == "secret"
    assert target.kwargs["socket_timeout"] == 1
    assert target.sentinel_kwargs["password"] == "sp"
    assert target.sentinel_kwargs["socket_connect_timeout"] == 2.0
    assert own == {"prefix": "p", "retries": 2}
    for bad in ("redis+sentinel://s1", "redis+sentinel://s1/a/1/x", "redis+sentinel:///m"):
        with pytest.raises(ConfigurationError):
            parse(bad, {})


def test_plain_urls_and_defaults() -> None:
    target, own = parse("redis://:pw@h:6380/2?prefix=x&health_check_interval=5", {})
    assert target.kind == "standalone"
    assert "prefix" not in target.url
    assert "health_check_interval=5" in target.url
    assert target.kwargs["socket_timeout"] == 2.0
    assert target.kwargs["socket_connect_timeout"] == 2.0
    assert own == {"prefix": "x"}
    assert parse("unix:///tmp/redis.sock?db=1", {})[0].kind == "standalone"
    assert redact("redis://user:pw@h:1/0") == "redis://user:***@h:1/0"
    assert redact("redis://h:1/0") == "redis://h:1/0"
    assert isinstance(open_store("redis+cluster://127.0.0.1:1"), RedisStore)
    with pytest.raises(ConfigurationError, match="brace-free"):
        RedisStore.from_url("redis://h", prefix="a{b}")
    with pytest.raises(ConfigurationError, match="bad Redis URL"):
        RedisStore.from_url("redis://h:notaport/0")


def test_missing_driver_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)
    with pytest.raises(ConfigurationError, match=r"mideng\[redis\]"):
        RedisStore.from_url("redis://127.0.0.1:1")


def test_unreachable_redis_is_store_unavailable() -> None:
    from socket import socket

    with socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = RedisStore.from_url(f"redis://127.0.0.1:{port}/0")
    with pytest.raises(StoreUnavailableError) as info:
        store.claim(request())
    assert isinstance(info.value.__cause__, redis.exceptions.ConnectionError)
    store.close()


def test_unix_socket_url(tmp_path: Path, prefix: str) -> None:
    path = tmp_path / "redis.sock"
    server = Server("--unixsocket", str(path), "--unixsocketperm", "700").start()
    try:
        store = open_store(f"unix://{path}?db=0", prefix=prefix)
        assert Guard(store).run("pay", "u1", lambda: 3) == 3
        assert redis.Redis(port=server.port).exists(f"{prefix}:{{pay:u1}}") == 1
        store.close()
    finally:
        server.cleanup()


def test_a_read_only_replica_is_unavailable_not_a_crash(own_server: Server, prefix: str) -> None:
    replica = Server("--replicaof", "127.0.0.1", str(own_server.port)).start()
    try:
        store = RedisStore.from_url(replica.url, prefix=prefix)
        with pytest.raises(StoreUnavailableError, match="read only replica") as info:
            store.claim(request(key="ro"))
        assert isinstance(info.value.__cause__, redis.exceptions.ResponseError)
        store.close()
    finally:
        replica.cleanup()


@pytest.fixture(scope="module")
def sentinel() -> Iterator[tuple[Server, Server]]:
    master = Server().start()
    watcher = Server(
        f"sentinel monitor mideng-master 127.0.0.1 {master.port} 1",
        "sentinel down-after-milliseconds mideng-master 60000",
        sentinel=True,
    ).start()
    yield master, watcher
    watcher.cleanup()
    master.cleanup()


def test_sentinel_leads_to_the_master(sentinel: tuple[Server, Server], prefix: str) -> None:
    master, watcher = sentinel
    store = open_store(f"redis+sentinel://127.0.0.1:{watcher.port}/mideng-master/0", prefix=prefix)
    assert isinstance(store, RedisStore)
    guard = Guard(store)
    assert guard.run("pay", "s1", lambda: {"ok": True}) == {"ok": True}
    direct = redis.Redis(port=master.port)
    assert direct.exists(store.key("pay", "s1")) == 1
    # The sentinel, not a guess, said where the master is.
    assert int(redis.Redis(port=watcher.port).info("stats")["total_connections_received"]) > 0
    direct.close()
    store.close()


@pytest.mark.anyio
async def test_sentinel_async(sentinel: tuple[Server, Server], prefix: str) -> None:
    master, watcher = sentinel
    store = RedisStore.from_url(
        f"redis+sentinel://127.0.0.1:{watcher.port}/mideng-master", prefix=prefix
    )
    guard = Guard(store)

    async def body() -> int:
        return 7

    assert await guard.arun("pay", "s2", body) == 7
    assert redis.Redis(port=master.port).exists(store.key("pay", "s2")) == 1
    await store.aclose()


# -- tokens and debounce --------------------------------------------------------------------------
def test_one_token_is_taken_by_exactly_one_of_100_threads(store: RedisStore) -> None:
    store.put_token("submit", "u1:order", "tok", 60)
    barrier = threading.Barrier(100)
    wins: list[bool] = []
    lock = threading.Lock()

    def take() -> None:
        barrier.wait()
        won = store.take_token("submit", "u1:order", "tok")
        with lock:
            wins.append(won)

    threads = [threading.Thread(target=take) for _ in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(wins) == 100
    assert wins.count(True) == 1


@pytest.mark.anyio
async def test_one_token_is_taken_once_by_100_tasks(store: RedisStore) -> None:
    await store.aput_token("submit", "u2:order", "tok", 60)
    wins = await asyncio.gather(
        *(store.atake_token("submit", "u2:order", "tok") for _ in range(100))
    )
    assert wins.count(True) == 1
    await store.aput_token("submit", "u2:order", "tok2", 60)
    await store.aput_token("submit", "u2:order", "tok3", 60)  # replaces tok2
    assert await store.atake_token("submit", "u2:order", "tok2") is False
    assert await store.atake_token("submit", "u2:order", "tok3") is True
    await store.aclose()


def test_hit_window_allows_limit_then_refuses(store: RedisStore) -> None:
    assert [store.hit("create", "u1", 0.5, 3) for _ in range(3)] == [None, None, None]
    wait = store.hit("create", "u1", 0.5, 3)
    assert wait is not None
    assert 0 < wait <= 0.5
    assert store.hit("create", "u2", 0.5, 3) is None
    time.sleep(0.6)
    assert store.hit("create", "u1", 0.5, 3) is None
    with pytest.raises(ConfigurationError):
        store.hit("create", "u1", 0.5, 0)


@pytest.mark.anyio
async def test_async_hit_window(store: RedisStore) -> None:
    answers = await asyncio.gather(*(store.ahit("create", "u3", 30, 5) for _ in range(20)))
    assert answers.count(None) == 5
    assert all(a is not None and 0 < a <= 30 for a in answers if a is not None)
    await store.aclose()
