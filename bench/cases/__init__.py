"""The cases ``python -m bench`` runs: each a module here with ``main(argv)``, named below with
what it measures. A counted case (``-python``) runs under valgrind; the others are timed."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """A case: its module in bench.cases, its one-line description, and the arguments it is
    run with before the command line's own."""

    module: str
    summary: str
    args: tuple[str, ...] = ()


CASES: dict[str, Entry] = {
    "core": Entry("core", "@idempotent on SQLite and memory against raw sqlite3 floors, timed"),
    "core-python": Entry("core_python", "core's contenders counted in instructions per call"),
    "python": Entry(
        "python", "Python instructions per Guard + SQLStore call, the driver stubbed, counted"
    ),
    "python-async": Entry(
        "python", "python's cases through Guard.arun on the async stub, counted", ("--async",)
    ),
    "redis": Entry("redis", "Redis and hybrid stores against the redis-py floor and two peers"),
    "redis-scripts": Entry(
        "redis_scripts", "time inside the Redis server per key of a batch claim and completion"
    ),
    "redis-memory": Entry(
        "redis_memory", "bytes per Redis record, a long result whole in its hash against in pieces"
    ),
    "sql": Entry("sql", "SQL store on PostgreSQL and MariaDB against the driver floor and idemkit"),
    "sqlite-async": Entry(
        "sqlite_async", "SQLite store's async calls in place, in the executor and sync"
    ),
    "effects": Entry("effects", "a four-step operation against four guarded calls"),
    "http": Entry(
        "http", "the HTTP middlewares against bare applications, floors, idemkit and stores"
    ),
    "http-python": Entry(
        "http_python", "instructions per HTTP request, middlewares against bare applications"
    ),
    "consumer": Entry(
        "consumer", "consumer throughput on Redis Streams and RabbitMQ; batch against single claims"
    ),
    "consumer-ratios": Entry(
        "consumer_ratios", "batched consumers on four brokers against each raw consume+ack floor"
    ),
    "consumer-python": Entry(
        "consumer_python", "instructions per message of a batched consumer, step by step"
    ),
    "outbox": Entry("outbox", "outbox relay throughput to RabbitMQ and commit-to-arrival latency"),
    "relay-ratios": Entry(
        "relay_ratios", "outbox relay against raw confirmed publishing on four brokers, latency"
    ),
    "dashboard": Entry(
        "dashboard", "dashboard pages' server time at 1M records and 100k outbox rows, timed"
    ),
    "counts": Entry(
        "counts", "stats and the dashboard overview at 1M and 10M records on SQL stores, timed"
    ),
    "purge": Entry(
        "purge", "purge of 10M rows, 3M expired, on each SQL store; claims' p99 during it, timed"
    ),
    "state": Entry("state", "mideng.state primitives against the same SQL by hand, timed"),
    "state-python": Entry(
        "state_python", "mideng.state primitives against the same SQL by hand, counted"
    ),
    "state-duplicate": Entry(
        "state_duplicate", "insert_once's duplicate on MariaDB against the same by hand, counted"
    ),
    "state-django": Entry(
        "state_django",
        "mideng.state primitives on a Django model against the ORM's update, counted",
    ),
}
