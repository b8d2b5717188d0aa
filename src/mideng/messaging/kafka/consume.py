"""Kafka's adapter: a consumer group member (aiokafka) feeding an IdempotentConsumer, batch
by batch.

    stop = asyncio.Event()
    await kafka.consume(consumer, "kafka://127.0.0.1:9092", topic="orders.paid",
                        group="stock", stop=stop)

Kafka redelivers by offset: whatever a group member read but had not committed when it died,
or when its partitions moved to another member in a rebalance, is read again by the next
owner. So each partition's fetched records go to ``handle_batch`` (one store round trip for
the claims), and the partition's offset is committed only after that, past every record that
was settled: acked (run now, or a duplicate, which is committed too) or dead-lettered. Kafka
cannot hand one record back, so a ``Retry`` stops the partition there: the offset is
committed up to it, the partition is rewound to it and paused for the verdict's delay; the
records after it were already decided and come back as duplicates, acked without running. A
record aiokafka cannot read at all (a header name that is not UTF-8) is logged and skipped.

A revoked partition is never committed by its old owner after the revocation: the rebalance
waits (``on_partitions_revoked``) for the batch in hand to be committed, and a batch fetched
before a revocation is abandoned when its turn comes, uncommitted, for the new owner to read
again.

A stop is bounded: ``stop`` cuts short the join (which waits for the group's first
assignment) and a fetch at once, and gives a commit in hand and the group leave
``close_timeout`` seconds each. A broker that does not answer by then (a LeaveGroup, or the
SyncGroup of a join whose leader left) is abandoned and the connections closed. That is safe
because an offset is committed only after its records were settled: what was not committed is
read again by the next owner and answered as duplicates. The user's handler is never cut short.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

from mideng.errors import ConfigurationError
from mideng.messaging.consumer import UNDECIDED_DELAY, Consumer, decide, undecided
from mideng.messaging.kafka.message import dead_headers, message_of
from mideng.messaging.message import Message
from mideng.messaging.verdict import Ack, DeadLetter, Retry, Verdict
from mideng.observability import logs
from mideng.stores.registry import require

#: After ``stop``, how long a commit in hand and the group leave may each wait for the broker.
CLOSE_TIMEOUT = 10.0

T = TypeVar("T")


def bootstrap_servers(url: str) -> str:
    """``host:port`` or ``kafka://host:port`` (comma-separated for several) as aiokafka wants."""
    servers = []
    for part in url.split(","):
        server = part.strip()
        if server.startswith("kafka://"):
            server = server[len("kafka://") :]
        server = server.rstrip("/")
        if not server or "/" in server or "://" in server:
            raise ConfigurationError(
                f"not a Kafka address (host:port or kafka://host:port): {url!r}"
            )
        servers.append(server)
    return ",".join(servers)


async def consume(
    consumer: Consumer,
    url: str,
    *,
    topic: str,
    group: str,
    stop: asyncio.Event,
    batch: int = 100,
    poll_timeout: float = 1.0,
    dead_topic: str | None = None,
    close_timeout: float = CLOSE_TIMEOUT,
    **options: Any,
) -> None:
    """Consume ``topic`` as a member of ``group`` until ``stop`` is set; the batch in hand is
    finished and committed first, and the group is left. Once ``stop`` is set, the commit and
    the leave wait at most ``close_timeout`` seconds each for the broker; a join or a fetch in
    progress is cut short at once.

    Up to ``batch`` records are fetched at a time. A dead-lettered record is copied to
    ``dead_topic`` (with its headers and the reason) when one is given, else logged and
    skipped. ``options`` go to ``AIOKafkaConsumer`` (``session_timeout_ms``,
    ``auto_offset_reset`` — ``"earliest"`` unless given, so a new group misses nothing ...);
    auto commit is always off.
    """
    if batch < 1:
        raise ConfigurationError(f"batch must be at least 1: {batch!r}")
    if close_timeout < 0:
        raise ConfigurationError(f"close_timeout must not be negative: {close_timeout!r}")
    if options.get("enable_auto_commit"):
        raise ConfigurationError("enable_auto_commit would commit offsets before processing")
    aiokafka = require("aiokafka", "kafka")
    servers = bootstrap_servers(url)
    settings = {"auto_offset_reset": "earliest", **options, "enable_auto_commit": False}
    from_start = settings["auto_offset_reset"] == "earliest"
    member = _Member(consumer, dead_topic, servers, stop, close_timeout, from_start)
    client = aiokafka.AIOKafkaConsumer(bootstrap_servers=servers, group_id=group, **settings)
    member.client = client
    client.subscribe([topic], listener=member.listener(aiokafka))
    try:
        # Starting waits for the group's first assignment, which a broker can hold for its
        # request timeout (a SyncGroup left unanswered when the leader leaves: members stop
        # one after another in a deployment). A fetch can likewise wait past its timeout while
        # the group rebalances. ``stop`` cuts both short: records fetched but not yet handed
        # out are simply read again by the next owner; nothing is committed for them.
        started = await _until_stopped(client.start(), stop, 0.0)
        if started is None:
            return
        started.result()  # a broker that cannot be reached raises here
        while not stop.is_set():
            member.resume_due()
            fetch = await _until_stopped(member.fetch(batch, poll_timeout), stop, 0.0)
            if fetch is None:
                break
            for partition, records in fetch.result().items():
                if stop.is_set():
                    break  # the partitions not started are read again by their next owner
                await member.process(partition, records)
    finally:
        try:
            await _leave(client, close_timeout)
        finally:
            await member.close()


async def _bounded(step: Awaitable[T], seconds: float) -> asyncio.Future[T] | None:
    """``step`` given ``seconds``: the finished step (its result or its error, a cancellation
    of its own among them), or None when it did not finish in time and was cancelled."""
    task = asyncio.ensure_future(step)
    try:
        await asyncio.wait({task}, timeout=seconds)
    finally:
        cut_short = not task.done()
        if cut_short:
            await _cancelled(task)
    return None if cut_short else task


async def _cancelled(*tasks: asyncio.Future[Any]) -> None:
    """Cancel ``tasks`` and wait for their ends; what they end with is theirs (a cancellation
    of this task still ends it)."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _until_stopped(
    step: Awaitable[T], stop: asyncio.Event, grace: float
) -> asyncio.Future[T] | None:
    """``step`` to its end, but once ``stop`` is set it has ``grace`` seconds more: the
    finished step, or None when it was abandoned (cancelled)."""
    task = asyncio.ensure_future(step)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        stopping.cancel()
    done = await _bounded(task, grace)
    return None if done is None or done.cancelled() else done


async def _leave(client: Any, seconds: float) -> None:
    """``client.stop()``: leaves the group, so its partitions go to the others at once. A
    broker that does not answer within ``seconds`` is left at that: the group drops the member
    after its session timeout instead, and the partitions' uncommitted records are read again
    by their next owners."""
    stopped = await _bounded(client.stop(), seconds)
    if stopped is not None and not stopped.cancelled():
        stopped.result()
        return
    if stopped is None:
        logs.kafka_leave_abandoned(seconds)
        # ``stop()`` was cancelled where the broker held it (the coordination task's join, or
        # the LeaveGroup): what it would have done after that is done below, on the client's
        # parts, which it has no call for, so that no task of the client outlives ``consume``.
        coordinator = client._coordinator
        if coordinator is not None:
            await _cancelled(coordinator._coordination_task)
            await coordinator._stop_heartbeat_task()
            await coordinator._stop_commit_offsets_refresh_task()
    # Otherwise ``stop()`` ended cancelled by itself, past the group's leave: aiokafka's
    # ``Fetcher.close()`` awaits each fetch task it cancels and re-raises the cancellation of
    # one a connection reset left pending, before the client's connections are closed (and a
    # second ``close()`` meets the same task first). Either way the fetcher's tasks are
    # cancelled and waited for here, their cancellations theirs, not this task's.
    fetcher = client._fetcher
    if fetcher is not None:
        await _cancelled(fetcher._fetch_task, *fetcher._pending_tasks)
    await client._client.close()


class _Member:
    """One group member's batches, pauses and the lock a revocation waits on."""

    def __init__(
        self,
        consumer: Consumer,
        dead_topic: str | None,
        servers: str,
        stop: asyncio.Event,
        close_timeout: float,
        from_start: bool,
    ) -> None:
        self.consumer = consumer
        self.dead_topic = dead_topic
        self.servers = servers
        self.stop = stop
        self.close_timeout = close_timeout
        self.client: Any = None
        self.producer: Any = None
        self.from_start = from_start  # read a partition the group never committed from its start
        self.busy = asyncio.Lock()
        self.paused: dict[Any, float] = {}
        #: Revocations so far, and how many there had been when the last fetch returned.
        self.revocations = self.fetched_at = 0

    def listener(self, aiokafka: Any) -> Any:
        member = self

        class Revocation(aiokafka.ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: Any) -> None:
                # The batch in hand commits while the partition is still ours.
                async with member.busy:
                    member.revocations += 1
                    for partition in revoked:
                        member.paused.pop(partition, None)

            async def on_partitions_assigned(self, assigned: Any) -> None:
                return None

        return Revocation()

    def resume_due(self) -> None:
        now = time.monotonic()
        for partition, until in list(self.paused.items()):
            if until <= now:
                del self.paused[partition]
                if partition in self.client.assignment():
                    self.client.resume(partition)

    async def fetch(self, batch: int, poll_timeout: float) -> dict[Any, Any]:
        # Noted before the fetch: a revocation while it waits counts against its batches too
        # (they may hold records of the assignment it ended).
        self.fetched_at = self.revocations
        timeout_ms = int(poll_timeout * 1000)
        positions = await self._positions()
        try:
            records: dict[Any, Any] = await self.client.getmany(
                timeout_ms=timeout_ms, max_records=batch
            )
        except UnicodeDecodeError:
            # A record aiokafka cannot read: it decodes header names as UTF-8, which another
            # client need not write. The fetch raised at it every time, and consume ended.
            return await self._around_unreadable(positions, batch, timeout_ms)
        return records

    async def _positions(self) -> dict[Any, int]:
        """Where each partition aiokafka has fetched from (so given a highwater) stands; this
        waits only while aiokafka resets one whose offset went out of range."""
        errors = require("aiokafka.errors", "kafka")
        positions: dict[Any, int] = {}
        for partition in self.client.assignment():
            if self.revocations != self.fetched_at:
                break  # a rebalance meanwhile: this fetch's batches are abandoned anyway
            if self.client.highwater(partition) is not None:
                with contextlib.suppress(errors.IllegalStateError):  # revoked while it waited
                    positions[partition] = await self.client.position(partition)
        return positions

    async def _around_unreadable(
        self, positions: dict[Any, int], batch: int, timeout_ms: int
    ) -> dict[Any, Any]:
        """What a fetch that met a record aiokafka cannot read should have returned, read
        again partition by partition up to that record, which is skipped. The fetch dropped
        what it had taken by then and moved partitions past it: each is put back first."""
        errors = require("aiokafka.errors", "kafka")
        fetched: dict[Any, Any] = {}
        try:
            await self._rewind(positions)
            for partition in self.client.assignment() - self.paused.keys():
                if records := await self._read_to_unreadable(partition, batch, timeout_ms):
                    fetched[partition] = records
        except errors.IllegalStateError:
            return {}  # a rebalance took a partition meanwhile: its next owner reads it
        return fetched

    async def _rewind(self, positions: dict[Any, int]) -> None:
        """Each partition where it stood. One first fetched from by the failed fetch began at
        its committed offset, or with none at its start when the group reads from the start;
        else where it began is lost, and it stays (as if the group joined a moment later)."""
        for partition in self.client.assignment():
            if partition in positions:
                self.client.seek(partition, positions[partition])
            elif (committed := await self.client.committed(partition)) is not None:
                self.client.seek(partition, committed)
            elif self.from_start:
                await self.client.seek_to_beginning(partition)
            else:  # sought where it is: what the failed fetch left of it is dropped
                self.client.seek(partition, await self.client.position(partition))

    async def _read_to_unreadable(self, partition: Any, batch: int, timeout_ms: int) -> list[Any]:
        """Up to ``batch`` records of ``partition``, fetched one at a time, so a record that
        cannot be read is met alone: it is skipped, and the records before it returned."""
        records: list[Any] = []
        while len(records) < batch and await self._unread(partition):
            try:
                fetched = await self.client.getmany(partition, timeout_ms=timeout_ms, max_records=1)
            except UnicodeDecodeError as exc:
                await self._skip(partition, exc)
                break
            if not fetched:
                break
            records += fetched[partition]
        return records

    async def _unread(self, partition: Any) -> bool:
        """Whether ``partition`` has records past its position (or may: never fetched yet)."""
        highwater = self.client.highwater(partition)
        return highwater is None or bool(await self.client.position(partition) < highwater)

    async def _skip(self, partition: Any, exc: UnicodeDecodeError) -> None:
        # aiokafka leaves the position after the last record read, at the one it could not
        # read, but past a gap in the offsets (a compaction's, a transaction marker's): then
        # the gap's offset is skipped, and the record at the next fetch.
        offset = await self.client.position(partition)
        logs.kafka_record_unreadable(f"{partition.topic}:{partition.partition}:{offset}", exc)
        self.client.seek(partition, offset + 1)

    async def process(self, partition: Any, records: Sequence[Any]) -> None:
        async with self.busy:
            # aiokafka keeps the old assignment from a revocation until the new one arrives:
            # a batch fetched before the revocation is abandoned even while its partition
            # still looks assigned (the new owner, maybe this member afresh, reads it again).
            if self.revocations != self.fetched_at or partition not in self.client.assignment():
                self._put_back(partition, records)
                return
            if partition in self.paused:
                return  # rewound meanwhile
            messages = [message_of(record) for record in records]
            try:
                verdicts = await decide(self.consumer, messages)
            except Exception as exc:
                logs.kafka_records_unhandled(len(messages), str(partition), exc)
                verdicts = undecided(messages)
            settled, delay = await self._settled(messages, verdicts)
            if settled:
                await self._commit(partition, messages[settled - 1].raw.offset + 1)
            if settled < len(messages):
                self.client.seek(partition, messages[settled].raw.offset)
                self.client.pause(partition)
                self.paused[partition] = time.monotonic() + delay

    def _put_back(self, partition: Any, records: Sequence[Any]) -> None:
        """A batch abandoned unread goes back where it began, if the partition is (again) this
        member's: aiokafka may keep the position the fetch moved past it across a rebalance
        that gave the partition back, and the next batch's commit would then step over
        records nothing handled. Read again, they are answered as duplicates at worst."""
        if not records or partition not in self.client.assignment():
            return
        errors = require("aiokafka.errors", "kafka")
        with contextlib.suppress(errors.IllegalStateError):  # revoked meanwhile
            self.client.seek(partition, records[0].offset)

    async def _settled(
        self, messages: Sequence[Message], verdicts: Sequence[Verdict]
    ) -> tuple[int, float]:
        """How many leading records are settled, and the delay of the first that is not."""
        for index, (message, verdict) in enumerate(zip(messages, verdicts, strict=True)):
            if isinstance(verdict, Ack):
                continue
            if isinstance(verdict, Retry):
                return index, verdict.delay
            if isinstance(verdict, DeadLetter):
                if not await self._dead_letter(message, verdict):
                    return index, UNDECIDED_DELAY
                continue
            raise TypeError(f"not a verdict: {verdict!r}")
        return len(messages), 0.0

    async def _dead_letter(self, message: Message, verdict: DeadLetter) -> bool:
        logs.kafka_record_dead_lettered(message.id, verdict.reason)
        if self.dead_topic is None:
            return True
        try:
            if self.producer is None:
                aiokafka = require("aiokafka", "kafka")
                producer = aiokafka.AIOKafkaProducer(bootstrap_servers=self.servers, acks="all")
                await producer.start()
                self.producer = producer
            await self.producer.send_and_wait(
                self.dead_topic,
                message.body,
                key=message.raw.key,
                headers=dead_headers(message.raw, verdict.reason),
            )
        except Exception as exc:
            # Never skipped without its copy: the partition rewinds and it comes back.
            logs.kafka_dead_letter_copy_failed(message.id, self.dead_topic, exc)
            return False
        return True

    async def _commit(self, partition: Any, offset: int) -> None:
        # aiokafka retries a commit for as long as the broker gives retriable errors; once
        # stopping, it is given ``close_timeout``, then left (the revocation and the leave wait
        # on this batch).
        committed = await _until_stopped(
            self.client.commit({partition: offset}), self.stop, self.close_timeout
        )
        if committed is None or committed.exception() is not None:
            # A rebalance took the partition first, or the broker did not answer while
            # stopping: its next owner reads these records again and the consumer's records
            # answer them as duplicates.
            logs.kafka_offset_uncommitted(offset, str(partition))

    async def close(self) -> None:
        if self.producer is not None:
            await self.producer.stop()
