"""Instructions per message of a batched consumer on the Redis store, and of its parts.

    .venv/bin/python -m bench consumer-python [--messages 2000]
    .venv/bin/python -m bench consumer-python --timed

Timed consumer figures (the consumer case) move with the machine's load; instruction counts do
not. Each case runs in a child process under ``valgrind --tool=callgrind`` twice, with 500 and
500 + ``--messages`` messages, in batches of 100 new business keys against the Redis server on
localhost; the difference divided by ``--messages`` is what the client executes per message
(redis-server's own work is another process, not counted). The cases build on each other:

- ``keys``: read each message's key and request id;
- ``claims``: and make the batch's calls and claim them (``aclaim_many``);
- ``claims + completions``: and complete them (``acomplete_many``);
- ``handle_batch``: ``IdempotentConsumer.handle_batch``, the whole consumer: the above, the
  handler's run, the batch's lease renewal, request ids and verdicts.

``--timed`` runs no valgrind: ``handle_batch`` over 3,000 new keys in batches of 100, best of
five, as wall time and as this process's CPU time per message (the difference is mostly
waiting for the server).
"""

from __future__ import annotations

import asyncio
import gc
import platform
import sys
import uuid

from bench.callgrind import child_call, instructions_per_call, need_valgrind
from bench.report import RESULTS, parser, write
from bench.services import REDIS_URL

BASE = 500
BATCH = 100
# Messages made in every run alike, whatever it consumes, so making them cancels out.
MADE = 5000
CASES = ("keys", "claims", "claims + completions", "handle_batch")


async def nothing(message: object) -> None:
    return None


async def run(case: str, n: int) -> None:
    from mideng import Guard
    from mideng.core.record import Ticket
    from mideng.guard.owner_ids import OWNERS
    from mideng.messaging import IdempotentConsumer, Message
    from mideng.messaging.keys import key_of, request_id_of
    from mideng.stores.batch import Completion
    from mideng.stores.redis import RedisStore

    store = RedisStore.from_url(REDIS_URL, prefix=f"cgc:{uuid.uuid4().hex[:8]}")
    consumer = IdempotentConsumer(Guard(store, ttl=600.0), "stock", nothing)
    messages = [
        Message(b'{"qty": 1}', {"idempotency-key": f"order:{uuid.uuid4().hex}"}, id=str(i))
        for i in range(MADE)
    ]
    # Connect and load the scripts before counting: the same in both runs.
    await consumer.handle_batch(
        [Message(b"{}", {"idempotency-key": f"w:{uuid.uuid4().hex}"}) for _ in range(BATCH)]
    )
    p = consumer.policy
    nothing_bytes = p.codec.encode(None)
    for i in range(0, n, BATCH):
        part = messages[i : i + BATCH]
        if case == "handle_batch":
            await consumer.handle_batch(part)
            continue
        keys = [key_of(m, consumer.key) for m in part]
        rids = [request_id_of(m) for m in part]
        if case == "keys":
            continue
        first = consumer.prepare(keys[0])
        calls = [first] + [
            first.like(k, next(OWNERS.ids), r) for k, r in zip(keys[1:], rids[1:], strict=True)
        ]
        claims = await store.aclaim_many([c.request() for c in calls])
        if case == "claims":
            continue
        done = [Completion(Ticket.of(c.record), nothing_bytes, p.codec.name, p.ttl) for c in claims]
        await store.acomplete_many(done)
    await store.aclose()


def child(case: str, messages: int) -> None:
    gc.disable()  # a collection lands in one run and not the other
    asyncio.run(run(case, messages))


async def timed() -> None:
    import time

    from mideng import Guard
    from mideng.messaging import IdempotentConsumer, Message
    from mideng.stores.redis import RedisStore

    store = RedisStore.from_url(REDIS_URL, prefix=f"cgt:{uuid.uuid4().hex[:8]}")
    consumer = IdempotentConsumer(Guard(store, ttl=600.0), "stock", nothing)
    wall = cpu = float("inf")
    for _ in range(5):
        messages = [
            Message(b"{}", {"idempotency-key": f"order:{uuid.uuid4().hex}"}, id=str(i))
            for i in range(3000)
        ]
        started, used = time.perf_counter(), time.process_time()
        for i in range(0, len(messages), BATCH):
            await consumer.handle_batch(messages[i : i + BATCH])
        wall = min(wall, (time.perf_counter() - started) / len(messages))
        cpu = min(cpu, (time.process_time() - used) / len(messages))
    await store.aclose()
    print(f"handle_batch: wall {wall * 1e6:.1f} µs a message, process CPU {cpu * 1e6:.1f} µs")


def main(argv: list[str]) -> None:
    options = parser("consumer-python", __doc__)
    options.add_argument("--messages", type=int, default=2000)
    options.add_argument("--timed", action="store_true", help="time handle_batch instead")
    args = options.parse_args(argv)
    if args.timed:
        asyncio.run(timed())
        return
    need_valgrind("consumer-python")
    if args.messages % BATCH or not 0 < args.messages <= MADE - BASE:
        options.error(f"--messages must be a multiple of {BATCH}, at most {MADE - BASE}")
    counts = {
        case: instructions_per_call(__spec__.name, case, args.messages, BASE) for case in CASES
    }
    rows, before = [], 0.0
    for case, total in counts.items():
        rows.append(f"| {case} | {total / 1000:.1f} | {(total - before) / 1000:.1f} |")
        before = total
    text = "\n".join(
        [
            "| case (batches of 100 new keys) | instructions per message, thousands "
            "| added by this step |",
            "|---|---:|---:|",
            *rows,
        ]
    )
    header = (
        f"Python {platform.python_version()}, {platform.machine()}, valgrind callgrind; "
        f"client instructions per message over {args.messages} messages, Redis on localhost."
    )
    print(header + "\n\n" + text)
    write(RESULTS / "consumer_python.md", header + "\n\n" + text)


if __name__ == "__main__":  # the child instructions_per_call counts
    child(*child_call(sys.argv[1:]))
