"""Redis store and hybrid store against the raw driver floor and two peers, in one run.

    .venv/bin/python -m bench redis [--url redis://...] [--rounds 200] [--calls 50]

Every row is the median of per-call wall times (µs) over ``--rounds`` batches of ``--calls``
calls each, after a warm-up. "first" is a call on a new key (the body runs and
its result is stored); "duplicate" is a call on a key whose result is stored (it is replayed).

The raw floor is what any Redis idempotency scheme must at least do with the same driver:
first call = ``SET NX PX`` (claim) + ``SET`` of a record-sized JSON value and its encoding
(store the result); duplicate = one ``GET`` of that value and its decoding.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import platform
import sqlite3
import sys
import tempfile
import time
import types
import uuid
import warnings
from pathlib import Path
from typing import Any

import redis
import redis.asyncio

from bench.contenders import RESULT, ACase, Case, aguard_case, guard_case
from bench.report import RESULTS, case_table, command, parser, write
from bench.services import REDIS_URL
from bench.timing import run_async, run_sync
from mideng import Guard
from mideng.stores.hybrid import HybridStore
from mideng.stores.record_table.schema import ddl
from mideng.stores.redis import RedisStore
from mideng.stores.sqlite import SQLiteStore

TTL_MS = 86_400_000


def record_value() -> bytes:
    """A JSON record as big as the one mideng stores: status, fence, owner, result, times."""
    now = time.time()
    return json.dumps(
        {
            "status": "succeeded",
            "fence": 1,
            "owner": uuid.uuid4().hex,
            "result": RESULT,
            "codec": "json",
            "attempts": 1,
            "created_at": now,
            "updated_at": now,
            "expires_at": now + 86400,
        }
    ).encode()


# -- the contenders, sync -------------------------------------------------------------------
def raw_case(client: Any, prefix: str) -> Case:
    def first(key: str) -> object:
        name = f"{prefix}:raw:{key}"
        client.set(name, b"processing", nx=True, px=TTL_MS)
        return client.set(name, record_value(), px=TTL_MS)

    def duplicate(key: str) -> object:
        return json.loads(client.get(f"{prefix}:raw:{key}"))

    return Case("raw floor (redis-py)", first, duplicate)


def hybrid_floor_case(client: Any, prefix: str, path: Path) -> Case:
    """What any scheme with Redis in front of a SQL table does at least, on the same SQLite
    setup as the hybrid store's (WAL, synchronous=NORMAL, the store's own table): a first call
    looks in Redis (a miss), inserts the claim row and stores the result in SQLite, then copies
    it to Redis; a duplicate is the Redis GET alone."""
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    for statement in ddl("sqlite", "r"):
        db.execute(statement)
    insert = (
        "INSERT INTO r (scope, key, status, fence, owner, lease_until, created_at, "
        "updated_at, expires_at) VALUES ('pay', ?, 'processing', 1, ?, ?, ?, ?, ?)"
    )
    update = (
        "UPDATE r SET status = 'succeeded', result = ?, codec = 'json', "
        "lease_until = NULL, updated_at = ?, expires_at = ? WHERE scope = 'pay' AND key = ?"
    )

    def first(key: str) -> object:
        name = f"{prefix}:rawh:{key}"
        client.get(name)
        now = time.time()
        db.execute(insert, (key, uuid.uuid4().hex, now + 60, now, now, now + 86460))
        db.execute(update, (json.dumps(RESULT).encode(), now, now + 86400, key))
        return client.set(name, record_value(), px=TTL_MS)

    def duplicate(key: str) -> object:
        return json.loads(client.get(f"{prefix}:rawh:{key}"))

    return Case("raw floor of a hybrid (redis-py + sqlite3)", first, duplicate)


def raw_connection_case(client: Any, prefix: str) -> Case:
    """The same commands on one redis-py connection held for the whole run, without the
    client's pool and its per-command readiness probe: the least the driver itself costs."""
    conn = client.connection_pool.get_connection()

    def command(*args: Any) -> Any:
        conn.send_command(*args)
        return conn.read_response()

    def first(key: str) -> object:
        name = f"{prefix}:rawconn:{key}"
        command("SET", name, b"processing", "NX", "PX", TTL_MS)
        return command("SET", name, record_value(), "PX", TTL_MS)

    def duplicate(key: str) -> object:
        return json.loads(command("GET", f"{prefix}:rawconn:{key}"))

    return Case("raw connection, no pool (redis-py)", first, duplicate)


def _without_boto3() -> None:
    """Powertools' idempotency package imports its DynamoDB layer (boto3) unconditionally.
    The Redis layer never touches it; when boto3 is absent, stand-ins let the import pass."""
    if importlib.util.find_spec("boto3") is not None:
        return
    names: dict[str, dict[str, object]] = {
        "boto3": {},
        "boto3.dynamodb": {},
        "boto3.dynamodb.types": {"TypeDeserializer": object},
        "botocore": {},
        "botocore.exceptions": {"ClientError": Exception},
    }
    for name, attrs in names.items():
        module = types.ModuleType(name)
        module.__dict__.update(attrs)
        sys.modules.setdefault(name, module)


class FakeLambdaContext:
    """The little of a Lambda context that powertools reads."""

    function_name = "bench"
    memory_limit_in_mb = 128
    invoked_function_arn = "arn:aws:lambda:local:0:function:bench"
    aws_request_id = "bench"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 300_000


def powertools_case(url: str, prefix: str) -> Case:
    _without_boto3()
    # Imported untyped: the peers' own annotations are not what this file checks.
    idem: Any = importlib.import_module("aws_lambda_powertools.utilities.idempotency")
    layer: Any = importlib.import_module(
        "aws_lambda_powertools.utilities.idempotency.persistence.redis"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # its rename, not our concern
        persistence = layer.RedisCachePersistenceLayer(
            client=redis.Redis.from_url(url, decode_responses=True)
        )
    config = idem.IdempotencyConfig(event_key_jmespath="order", use_local_cache=False)
    context = FakeLambdaContext()

    def lambda_handler(event: dict[str, str], ctx: object) -> dict[str, str]:
        return RESULT

    handler = idem.idempotent(
        persistence_store=persistence, config=config, key_prefix=f"{prefix}:powertools"
    )(lambda_handler)

    def call(key: str) -> object:
        return handler({"order": key}, context)

    return Case("aws-lambda-powertools (Redis)", call, call)


def _idemkit(url: str, namespace: str) -> tuple[Any, Any, Any]:
    kit: Any = importlib.import_module("idemkit")
    backend = kit.RedisBackend.from_url(url, namespace=namespace)
    return kit, backend, kit.MethodConfig(key_fields=["order"], scope=lambda args: "bench")


def idemkit_sync_case(url: str, prefix: str) -> Case:
    kit, backend, config = _idemkit(url, f"{prefix}:idemkit-sync")

    def pay(order: str) -> dict[str, str]:
        return RESULT

    call = kit.idempotent_sync(backend=backend, config=config)(pay)
    return Case("idemkit idempotent_sync (Redis)", call, call)


# -- the contenders, async ------------------------------------------------------------------
def araw_case(client: Any, prefix: str) -> ACase:
    async def first(key: str) -> object:
        name = f"{prefix}:araw:{key}"
        await client.set(name, b"processing", nx=True, px=TTL_MS)
        return await client.set(name, record_value(), px=TTL_MS)

    async def duplicate(key: str) -> object:
        return json.loads(await client.get(f"{prefix}:araw:{key}"))

    return ACase("raw floor (redis.asyncio)", first, duplicate)


def aidemkit_case(url: str, prefix: str) -> ACase:
    kit, backend, config = _idemkit(url, f"{prefix}:idemkit-async")

    async def pay(order: str) -> dict[str, str]:
        return RESULT

    call = kit.idempotent(backend=backend, config=config)(pay)
    return ACase("idemkit idempotent (Redis)", call, call)


NOTES = [
    "### What the rows do",
    "",
    "- raw floor: first = `SET NX PX` + `json.dumps` of a record + `SET PX`; duplicate = `GET` +",
    "  `json.loads`. No fencing, no store clock, no result typing: the least any scheme does.",
    "- raw connection, no pool: the same commands on one redis-py connection held for the run.",
    "  redis-py's client probes a pooled connection before every command (a non-blocking read",
    "  and two socket-mode switches: three system calls). The mideng Redis store skips that",
    "  probe for connections it has just used (docs/stores-redis.md says why that is safe), so",
    "  this row, not the floor, is the least its path can cost.",
    "- mideng: first = claim function + body + complete function (a compare-and-set on owner",
    "  and fence); duplicate = the claim function, which answers with the stored result. Both",
    "  read the server's clock. The Guard adds key checks, an owner id, the codec (typed",
    "  results) and the lease heartbeat. The duplicate warning log is switched off for the run.",
    "- hybrid: duplicate = one Redis function call (the copy), never SQLite; first = Redis miss +",
    "  SQLite claim + SQLite complete + copy to Redis. Its own floor is the least any scheme",
    "  with Redis in front of SQL does: a Redis GET (the miss), the SQLite INSERT + UPDATE of",
    "  the SQL floor on the same table and settings, a Redis SET of the record; a duplicate is",
    "  the Redis GET.",
    "- aws-lambda-powertools: `@idempotent` handler, RedisCachePersistenceLayer, a fake Lambda",
    "  context; first = `SET NX EX` + `SET EX`, duplicate = a failing `SET NX`, then `GET`.",
    "- idemkit: `idempotent_sync` / `idempotent` with its RedisBackend (Lua), no local cache.",
    "",
    "The machine is shared: absolute numbers move between runs; compare within one table.",
]


def main(argv: list[str]) -> None:
    options = parser("redis", __doc__)
    options.add_argument("--url", default=REDIS_URL)
    options.add_argument("--calls", type=int, default=50, help="calls per batch")
    options.add_argument("--rounds", type=int, default=200)
    options.add_argument("--warm", type=int, default=200)
    options.add_argument("--out", default=str(RESULTS / "redis.md"))
    args = options.parse_args(argv)
    # Duplicates log a warning each (by design); the peers log nothing, so neither do we here.
    logging.getLogger("mideng").setLevel(logging.ERROR)

    prefix = f"mideng-bench-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(args.url)
    tmp = tempfile.TemporaryDirectory()
    store = RedisStore.from_url(args.url, prefix=prefix)
    hybrid = HybridStore(
        fast=RedisStore.from_url(args.url, prefix=f"{prefix}:hybrid"),
        durable=SQLiteStore(str(Path(tmp.name) / "durable.db")),
    )
    hybrid_floor = hybrid_floor_case(client, prefix, Path(tmp.name) / "raw.db")
    hybrid_case = guard_case("mideng HybridStore (Redis + SQLite)", Guard(hybrid))
    sync_cases = [
        raw_case(client, prefix),
        raw_connection_case(client, prefix),
        guard_case("mideng RedisStore", Guard(store)),
        hybrid_floor,
        hybrid_case,
        powertools_case(args.url, prefix),
        idemkit_sync_case(args.url, prefix),
    ]
    aclient = redis.asyncio.Redis.from_url(args.url)
    async_cases = [
        araw_case(aclient, prefix),
        aguard_case("mideng RedisStore", Guard(store)),
        aguard_case("mideng HybridStore (Redis + SQLite)", Guard(hybrid)),
        aidemkit_case(args.url, prefix),
    ]

    async def run_all_async() -> None:
        await run_async(async_cases, args.calls, args.rounds, args.warm)
        await aclient.aclose()
        await store.aclose()
        await hybrid.aclose()

    try:
        run_sync(sync_cases, args.calls, args.rounds, args.warm)
        asyncio.run(run_all_async())
    finally:
        for name in client.scan_iter(match=f"{prefix}*", count=1000):
            client.delete(name)
        store.close()
        hybrid.close()
        tmp.cleanup()

    server = client.info("server")["redis_version"]
    client.close()
    lines = [
        "# Redis store benchmark",
        "",
        f"Command: `{command('redis', argv)}`",
        "",
        f"Python {platform.python_version()}, redis-py {redis.__version__}, Redis {server}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs; {args.rounds} batches of {args.calls} calls "
        "per contender, interleaved; medians, µs per call.",
        "",
        *case_table("Sync (Guard.run)", sync_cases, sync_cases[0]),
        *case_table(
            "Hybrid against its own floor (sync, from the runs above)",
            [hybrid_floor, hybrid_case],
            hybrid_floor,
        ),
        *case_table("Async (Guard.arun)", async_cases, async_cases[0]),
        *NOTES,
    ]
    text = "\n".join(lines)
    print(text)
    write(args.out, text)
