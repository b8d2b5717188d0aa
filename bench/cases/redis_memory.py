"""Bytes per Redis record, key layout 1 (a long result whole in the hash) against layout 2 (cut
into pieces in it), for a 32-byte, a 100-byte and a 2 kB result.

    .venv/bin/python -m bench redis-memory [--records 100000] [--batch 500]

Bytes per record = the server's ``used_memory`` after writing ``--records`` completed records
less before, over the records: what the records cost the server, allocator rounding and the
keyspace's own tables included. The 2 kB row also says what a record costs beyond its result.
A Redis server of the case's own is started (``redis-server`` on a spare port, nothing kept on
disk), so nobody else's keys move the count. Layout 2 is written by the store itself (batch
claims, then batch completions); layout 1 by the same writes the previous release's Lua made,
field for field (a claim's HSET, then the completion's HDEL and HSET), so the two differ only
in where the result is kept. OBJECT ENCODING of a record's hash is shown for each. Then a
duplicate's claim of some of the records, which answers the stored result, is timed inside the
server (``INFO commandstats``): the same claim function reading a whole value and pieces.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from bench.report import RESULTS, command, parser, write
from mideng.core.record import ClaimRequest, Ticket
from mideng.stores.batch import Completion
from mideng.stores.redis import RedisStore

SIZES = (32, 100, 2048)
TTL = 86_400.0
PREFIX = "mideng"


@contextmanager
def own_server() -> Iterator[str]:
    """A redis-server of this case's own on a spare port; its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        options = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmp]
        server = subprocess.Popen(
            [binary, "--port", str(port), *options], stdout=subprocess.DEVNULL
        )
        url = f"redis://127.0.0.1:{port}/0"
        try:
            client = redis.Redis.from_url(url)
            for _ in range(100):
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.05)
            client.close()
            yield url
        finally:
            server.terminate()
            server.wait()


def used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def layout_2(url: str, keys: list[str], result: bytes, batch: int) -> None:
    """Completed records written by the store: batch claims, then batch completions."""
    store = RedisStore.from_url(url, prefix=PREFIX)
    try:
        for i in range(0, len(keys), batch):
            reqs = [
                ClaimRequest("pay", k, uuid.uuid4().hex, 30.0, TTL) for k in keys[i : i + batch]
            ]
            claims = store.claim_many(reqs)
            store.complete_many(
                [Completion(Ticket.of(c.record), result, "json", TTL) for c in claims]
            )
    finally:
        store.close()


def layout_1(client: redis.Redis, names: list[str], result: bytes, batch: int) -> None:
    """Completed records as the previous release's claim and complete wrote them."""
    for i in range(0, len(names), batch):
        pipe = client.pipeline(transaction=False)
        now = time.time()
        at, lu, ea = f"{now:.6f}", f"{now + 30:.6f}", f"{now + TTL:.6f}"
        px = int((now + TTL) * 1000) + 1
        for name in names[i : i + batch]:
            pipe.hset(
                name,
                mapping={
                    "s": "processing",
                    "o": uuid.uuid4().hex,
                    "f": "1",
                    "a": "1",
                    "lu": lu,
                    "ca": at,
                    "ua": at,
                    "ea": ea,
                },
            )
            pipe.pexpireat(name, px)
            pipe.hdel(name, "lu")
            pipe.hset(
                name, mapping={"s": "succeeded", "r": result, "c": "json", "ua": at, "ea": ea}
            )
            pipe.pexpireat(name, px)
        pipe.execute()


def replay_usec(url: str, keys: list[str], batch: int) -> float:
    """µs inside the server per key of the median batch claim that replay ``keys``' records: the
    FCALL line of ``INFO commandstats``, reset before each batch."""
    client = redis.Redis.from_url(url)
    store = RedisStore.from_url(url, prefix=PREFIX)
    per_key = []
    try:
        for i in range(0, len(keys), batch):
            part = keys[i : i + batch]
            reqs = [ClaimRequest("pay", k, uuid.uuid4().hex, 30.0, TTL) for k in part]
            client.config_resetstat()
            store.claim_many(reqs)
            usec = int(client.info("commandstats").get("cmdstat_fcall", {}).get("usec", 0))
            per_key.append(usec / len(part))
    finally:
        store.close()
        client.close()
    # The median batch: the machine's other work lands on a few batches, not on the layout.
    return statistics.median(per_key)


def measure(
    url: str, layout: int, size: int, records: int, batch: int, replays: int
) -> tuple[float, str, float]:
    """(bytes per record, the encoding of a record's hash, µs in the server per replayed
    claim) for ``records`` records, ``replays`` of them claimed again."""
    client = redis.Redis.from_url(url)
    client.flushall()
    # The layout key and the function library are the prefix's, not the records': written
    # before the count starts.
    layout_2(url, ["warm"], b"x", 1)
    client.delete(f"{PREFIX}:{{pay:warm}}")
    result = b'"' + b"r" * (size - 2) + b'"'
    keys = [f"order:{i:08d}" for i in range(records)]
    before = used(client)
    if layout == 2:
        layout_2(url, keys, result, batch)
    else:
        layout_1(client, [f"{PREFIX}:{{pay:{k}}}" for k in keys], result, batch)
    per_record = (used(client) - before) / records
    encoding = client.object("encoding", f"{PREFIX}:{{pay:{keys[0]}}}")
    replay = replay_usec(url, keys[:replays], 100)
    client.flushall()
    client.close()
    return per_record, encoding.decode() if isinstance(encoding, bytes) else str(encoding), replay


def main(argv: list[str]) -> None:
    options = parser("redis-memory", __doc__)
    options.add_argument("--records", type=int, default=100_000)
    options.add_argument("--batch", type=int, default=500)
    options.add_argument("--replays", type=int, default=20_000, help="records claimed again")
    options.add_argument("--out", default=str(RESULTS / "redis_memory.md"))
    args = options.parse_args(argv)
    rows = []
    with own_server() as url:
        client = redis.Redis.from_url(url)
        server = client.info("server")["redis_version"]
        limit = client.config_get("hash-max-listpack-value").get("hash-max-listpack-value")
        client.close()
        for size in SIZES:
            old = measure(url, 1, size, args.records, args.batch, args.replays)
            new = measure(url, 2, size, args.records, args.batch, args.replays)
            rows.append((size, old, new))
    lines = [
        "# Redis store: bytes per record",
        "",
        f"Command: `{command('redis-memory', argv)}`",
        "",
        f"Redis {server} (hash-max-listpack-value {limit}), redis-py {redis.__version__}, "
        f"{platform.machine()}, {os.cpu_count()} CPUs; {args.records} completed records per "
        "row, each with a one-day expiry; used_memory delta / records.",
        "",
        "| result | layout 1 | encoding | beyond the result | layout 2 | encoding "
        "| beyond the result | layout 2 / layout 1 |",
        "|---:|---:|---|---:|---:|---|---:|---:|",
    ]
    for size, (old_bytes, old_enc, _), (new_bytes, new_enc, _) in rows:
        lines.append(
            f"| {size} B | {old_bytes:.0f} | {old_enc} | {old_bytes - size:.0f} "
            f"| {new_bytes:.0f} | {new_enc} | {new_bytes - size:.0f} "
            f"| {new_bytes / old_bytes:.2f} |"
        )
    lines += [
        "",
        f"A duplicate's claim of {args.replays} of the records (batch claims of 100, each a "
        "replay), µs inside the server per key, median batch (INFO commandstats, FCALL):",
        "",
        "| result | layout 1 | layout 2 | layout 2 / layout 1 |",
        "|---:|---:|---:|---:|",
    ]
    for size, (_, _, old_us), (_, _, new_us) in rows:
        lines.append(f"| {size} B | {old_us:.2f} | {new_us:.2f} | {new_us / old_us:.2f} |")
    text = "\n".join(lines)
    print(text)
    write(args.out, text)
