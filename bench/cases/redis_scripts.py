"""Time inside the Redis server per key of a batch claim and a batch completion.

    .venv/bin/python -m bench redis-scripts [--rounds 30] [--batch 100]

A batched consumer waits on two function calls per batch (claim_many, complete_many), and the
server runs them on its one thread: their time per key is a floor under a batched message that
no client change moves. The server's own count is read from ``INFO commandstats`` (the FCALL
line's ``usec``, reset before each call), so the client's Python and the network are not in
it. Each round claims ``--batch`` new keys, then completes them; min and median over the rounds.
Resetting the statistics touches the whole server's counters: run it on a server nobody else
is measuring.
"""

from __future__ import annotations

import asyncio
import statistics
import uuid

import redis

from bench.report import parser
from bench.services import REDIS_URL
from mideng.core.record import ClaimRequest, Ticket
from mideng.stores.batch import Completion
from mideng.stores.redis import RedisStore


def fcall_usec(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_fcall", {}).get("usec", 0))


def main(argv: list[str]) -> None:
    options = parser("redis-scripts", __doc__)
    options.add_argument("--rounds", type=int, default=30)
    options.add_argument("--batch", type=int, default=100)
    args = options.parse_args(argv)
    asyncio.run(measure(args.rounds, args.batch))


async def measure(rounds: int, batch: int) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    prefix = f"mideng:bench:costs:{uuid.uuid4().hex[:8]}"
    store = RedisStore.from_url(REDIS_URL, prefix=prefix)
    claims_us, completions_us = [], []
    try:
        for round_ in range(rounds + 1):  # round 0 loads the library and warms up
            reqs = [
                ClaimRequest("stock", f"order:{uuid.uuid4().hex}", "o", 60, 600)
                for _ in range(batch)
            ]
            client.config_resetstat()
            claims = await store.aclaim_many(reqs)
            claim_us = fcall_usec(client)
            items = [Completion(Ticket.of(c.record), b"null", "json", 600) for c in claims]
            client.config_resetstat()
            await store.acomplete_many(items)
            if round_:
                claims_us.append(claim_us / batch)
                completions_us.append(fcall_usec(client) / batch)
    finally:
        await store.aclose()
        for name in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(name)
        client.close()
    print(f"µs inside the server per key, batches of {batch}, {rounds} rounds\n")
    print("| call | min | median |\n|---|---:|---:|")
    for name, values in (("batch claim", claims_us), ("batch completion", completions_us)):
        print(f"| {name} | {min(values):.2f} | {statistics.median(values):.2f} |")
