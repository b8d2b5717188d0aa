"""NATS JetStream as the base suite drives it: a fresh stream (``subject`` and
``subject.>``), the durable the consumers share, dead letters on ``subject.dead``, and the
consumer's connection through a proxy that resets it for real."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any
from urllib.parse import urlparse

from mideng.messaging import nats as adapter
from mideng.messaging.headers import IDEMPOTENCY_KEY
from mideng.messaging.reconnect import Backoff
from tests.brokers import NATS_URL, NatsNames
from tests.helpers.cut_proxy import CutProxy
from tests.messaging.base.broker import Broker, Consuming, DeadCopy, Link, Outgoing


class Proxied(Link):
    """The consumer connected through ``proxy``; the adapter, not nats-py, reconnects unless
    told otherwise."""

    broker: JetStream

    def __init__(self, broker: JetStream, proxy: CutProxy) -> None:
        self.broker, self.proxy = broker, proxy

    def consume(self, consumer: Any, stop: asyncio.Event, **options: Any) -> Consuming:
        chosen = {"allow_reconnect": False, "reconnect_time_wait": 0.1, "batch": 3, **options}
        return self.broker.consume(
            consumer,
            stop,
            url=f"nats://127.0.0.1:{self.proxy.port}",
            reconnect=Backoff(0.01, 0.05),
            **chosen,
        )

    def drop(self, waiting: bool = False) -> int:
        return self.proxy.cut_from_thread()


class JetStream(Broker):
    """A fresh stream and the durable the consumers share."""

    broker = "nats"
    url = NATS_URL
    lease = 10.0

    def __init__(self, names: NatsNames, *, ack_wait: float = 2.0, batch: int = 10) -> None:
        self.names = names
        self.dead = f"{names.subject}.dead"
        self.ack_wait = ack_wait
        self.batch = batch
        asyncio.run(self.jetstream_call("add_stream", name=names.stream, subjects=self.subjects))

    @property
    def subjects(self) -> list[str]:
        return [self.names.subject, self.names.wildcard]

    @contextlib.asynccontextmanager
    async def jetstream(self) -> AsyncIterator[Any]:
        """A JetStream context on a client of its own, closed afterwards."""
        import nats

        client = await nats.connect(self.url)
        try:
            yield client.jetstream()
        finally:
            await client.close()

    async def jetstream_call(self, call: str, *args: Any, **kwargs: Any) -> Any:
        """One JetStream API call (``delete_consumer``, ``add_stream`` ...) on its own client."""
        async with self.jetstream() as jetstream:
            return await getattr(jetstream, call)(*args, **kwargs)

    def adapter(self, slot: int = 0) -> dict[str, Any]:
        return {
            "stream": self.names.stream,
            "subject": self.names.subject,
            "durable": self.names.durable,
            "batch": self.batch,
            "ack_wait": self.ack_wait,
            "fetch_timeout": 0.5,
        }

    def consume(
        self, consumer: Any, stop: asyncio.Event, url: str | None = None, **options: Any
    ) -> Consuming:
        return adapter.consume(
            consumer, url or self.url, stop=stop, **{**self.adapter(), **options}
        )

    def publish(
        self,
        messages: Sequence[Outgoing],
        headers: Mapping[str, str] | None = None,
        subject: str | None = None,
    ) -> list[str]:
        return asyncio.run(self._publish(messages, headers or {}, subject or self.names.subject))

    async def _publish(
        self, messages: Sequence[Outgoing], headers: Mapping[str, str], subject: str
    ) -> list[str]:
        async with self.jetstream() as jetstream:
            acks = []
            for key, body in messages:
                sent = {**headers, **({} if key is None else {IDEMPOTENCY_KEY: key})}
                acks.append(await jetstream.publish(subject, body, headers=sent))
            return [str(ack.seq) for ack in acks]

    def publish_headers(self, *messages: Any) -> list[str]:
        asyncio.run(self.hpub(messages))
        return []  # the stream's sequences, which a bare HPUB is not told

    async def hpub(self, messages: Sequence[Mapping[str, bytes]]) -> None:
        """Each message in one HPUB of its own: nats-py sends header values only as UTF-8
        text, so the bytes go on the wire as another client may send them."""
        host, port = self.url.removeprefix("nats://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            await reader.readline()  # INFO
            writer.write(b'CONNECT {"verbose":false,"pedantic":false,"headers":true}\r\n')
            for headers in messages:
                lines = b"".join(b"%s: %s\r\n" % (k.encode(), v) for k, v in headers.items())
                block = b"NATS/1.0\r\n" + lines + b"\r\n"
                command = b"HPUB %s %d %d\r\n" % (
                    self.names.subject.encode(),
                    len(block),
                    len(block) + 2,
                )
                writer.write(command + block + b"{}\r\n")
            writer.write(b"PING\r\n")
            await writer.drain()
            assert await reader.readline() == b"PONG\r\n"  # every HPUB before it was taken
        finally:
            writer.close()
            await writer.wait_closed()

    def dead_letter_options(self) -> dict[str, Any]:
        return {"dead_subject": self.dead}

    def dead_letters(self, at_least: int = 1) -> list[DeadCopy]:
        return asyncio.run(self._dead_letters())

    async def _dead_letters(self) -> list[DeadCopy]:
        import nats

        async with self.jetstream() as jetstream:
            sub = await jetstream.pull_subscribe(self.dead, stream=self.names.stream)
            try:
                found = list(await sub.fetch(10, timeout=2))
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                found = []
        return [
            DeadCopy(
                headers.get(IDEMPOTENCY_KEY),
                headers.get(adapter.DEAD_LETTER_REASON, ""),
                m.data,
                headers,
                m,
            )
            for m in found
            for headers in [m.headers or {}]
        ]

    def info(self) -> Any:
        return asyncio.run(self._info())

    async def _info(self) -> Any:
        from nats.js.errors import NotFoundError

        try:
            return await self.jetstream_call("consumer_info", self.names.stream, self.names.durable)
        except NotFoundError:
            return None

    def unsettled(self) -> int:
        info = self.info()
        if info is None:
            raise AssertionError("the durable is not there")
        return int(info.num_pending + info.num_ack_pending)

    def settled(self) -> bool:
        info = self.info()
        return info is not None and info.num_pending == 0 and info.num_ack_pending == 0

    def state(self) -> str:
        info = self.info()
        if info is None:
            return "no durable"
        return f"{info.num_pending} pending, {info.num_ack_pending} unacked"

    @contextlib.asynccontextmanager
    async def droppable(self) -> AsyncIterator[Link]:
        async with CutProxy(urlparse(self.url).port or 4222) as proxy:
            yield Proxied(self, proxy)
