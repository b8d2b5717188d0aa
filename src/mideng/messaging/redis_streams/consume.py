"""Redis Streams' adapter: a consumer group member that runs each entry once per business key.

    await redis_streams.consume(consumer, "redis://localhost", stream="orders",
                                group="stock", name="worker-1", stop=stop)

Entries are read with XREADGROUP and acked with XACK only after the consumer decided (after
the commit, in the transactional mode); duplicates are acked too. A batch of new entries is
decided while the next one is read and decided: its claims and completions wait on the store,
and the next batch's Python fills those waits, so up to two batches (``2 * batch`` entries)
are in hand at once, each acked only after it was decided; their handlers still run one at a
time, in the order the entries were read (mideng.messaging.handlers), and a transactional
consumer decides one batch at a time. A copy of a key in the batch beside it finds that key
in flight and is retried after ``in_flight_delay``. The group is created at id 0 (so entries
added before the first consumer started are read) unless it exists. An entry's ``body`` field
is the message body and every other field a header; ``Message.id`` is the entry id and
``attempt`` the group's delivery count when the entry was taken over or retried.

Entries left pending by a member that died are taken over with XAUTOCLAIM once idle for
``claim_idle`` seconds (the consumer's lease unless given); this member's own pending entries,
left by an earlier run under the same name, are read first. A Retry keeps the entry pending and
claims it again after the delay; a DeadLetter adds it to ``dead_stream`` (``<stream>:dead``),
with its reason, and acks it in one MULTI. When ``stop`` is set the batches in hand are finished
and the call returns; scheduled retries stay pending, for this name's next run or a takeover.

A dropped connection (once redis-py's own retries are spent) does not end the call: it is
logged, retried with a bounded exponential backoff that ``stop`` cuts short, and after the
reconnect this name rereads its own pending entries from the start, so an entry read but not
acked before the drop, or whose XACK was lost with it, is answered by the consumer's record (a
finished one is acked without running again).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import time
from collections.abc import Sequence
from typing import Any, Protocol

from mideng.core.policy import Policy
from mideng.errors import ConfigurationError
from mideng.messaging.consumer import Consumer, decide
from mideng.messaging.handlers import TURN, Turn, handlers_done
from mideng.messaging.message import Message
from mideng.messaging.reconnect import Backoff
from mideng.messaging.redis_streams.message import CompactReader, dead_fields, id_text, message_of
from mideng.messaging.verdict import Ack, DeadLetter, Retry, Verdict
from mideng.observability import logs


class StreamConsumer(Consumer, Protocol):
    """The consumer as this adapter reads it besides its verdicts: its policy's lease (how long
    an entry sits pending before another member takes it over, unless ``claim_idle`` says) and
    its engine (set: each message is its own transaction, so one batch is decided at a time).
    ``IdempotentConsumer`` is one."""

    policy: Policy
    engine: Any


def _redis() -> Any:
    try:
        import redis.asyncio as aredis
    except ImportError as exc:  # pragma: no cover - the extra is installed in tests
        raise ConfigurationError(
            "the Redis Streams adapter needs redis-py: pip install 'mideng[redis]'"
        ) from exc
    return aredis


class _Member:
    """One group member's state: the client, the retry schedule, when it last looked around."""

    def __init__(
        self,
        client: Any,
        consumer: StreamConsumer,
        stream: str,
        group: str,
        name: str,
        batch: int,
        claim_idle: float,
        dead_stream: str,
    ) -> None:
        self.client, self.consumer = client, consumer
        self.stream, self.group, self.name = stream, group, name
        self.batch, self.claim_idle, self.dead_stream = batch, claim_idle, dead_stream
        self.retries: list[tuple[float, str]] = []  # (due, entry id), a heap
        self.scheduled: set[str] = set()
        self.next_takeover = 0.0
        self.autoclaim_from = "0-0"
        self.pending_from: str | None = "0"  # paging through this name's own pending entries
        self.ready = False  # the group is known to exist on this connection
        self.compact = CompactReader(client)
        # Settled entries whose XACK rides on the next compact read (one round trip fewer a
        # batch); sent on their own before any other read, and at stop.
        self.unacked: list[str] = []
        # The batch read last, being decided while the next is read: a batch's claims and
        # completions wait on the store, and the next batch's reading and the consumer's own
        # Python for it fill that wait. Settled by the next step.
        self.deciding: tuple[list[Message], asyncio.Future[list[Verdict]]] | None = None
        self.turn: Turn | None = None  # the last batch's place in the handlers' line

    async def step(self, block: float) -> None:
        """One look for work and its settling: the group first, after a start or a reconnect.

        New entries are read while the batch before them is still being decided (see
        ``deciding``); anything else (a due retry, this name's own pending entries, a
        takeover, the group's creation) waits until that batch is settled."""
        if not self.ready or self._looks_around():
            await self.settle_deciding()
            if not self.ready:
                await self.create_group()
                self.ready = True
            messages = await self.due_retries()
            if not messages:
                messages = await self.own_pending()
            if not messages:
                messages = await self.takeovers()
            if messages:
                await self.settle(messages, await decide(self.consumer, messages))
                return
        # Taken only after the read: a read that fails leaves it for abandon_deciding.
        messages = await self.fresh(self.wait_for(block), wait=self.deciding is None)
        previous = self._taken()
        if messages and self.consumer.engine is not None:
            # Transactional: each message is its own transaction, claim to commit, and two
            # batches at once would be two writers (one file's lock, on SQLite); one at a time.
            await self.settle(messages, await decide(self.consumer, messages))
        elif messages:
            self.turn = turn = Turn(self.turn)
            context = contextvars.copy_context()
            context.run(TURN.set, turn)
            task = context.run(asyncio.ensure_future, _decide_in_turn(self.consumer, messages))
            self.deciding = (messages, task)
        if previous is not None:
            await self.settle(previous[0], await previous[1])

    def _looks_around(self) -> bool:
        """Whether this step has more to do than read new entries."""
        return (
            self.pending_from is not None
            or (bool(self.retries) and self.retries[0][0] <= time.monotonic())
            or time.monotonic() >= self.next_takeover
        )

    def _taken(self) -> tuple[list[Message], asyncio.Future[list[Verdict]]] | None:
        taken, self.deciding = self.deciding, None
        return taken

    async def settle_deciding(self) -> None:
        """Wait for the batch being decided and settle it."""
        if (taken := self._taken()) is not None:
            await self.settle(taken[0], await taken[1])

    async def abandon_deciding(self) -> None:
        """After a lost connection: let the batch being decided finish (its handlers run to
        the end and its records are written), keep its retries' schedule, and leave its
        entries pending, for this name's reread to answer from their records."""
        if (taken := self._taken()) is not None:
            messages, task = taken
            for message, verdict in zip(messages, await task, strict=True):
                if isinstance(verdict, Retry):
                    self.schedule(message, verdict)

    def cancel_deciding(self) -> None:
        if (taken := self._taken()) is not None:
            taken[1].cancel()

    def connection_lost(self) -> None:
        """Whatever was read and not acked is still in this name's pending list: read it all
        again (the finished entries are acked unrun), and check the group still exists (a
        restarted server without persistence lost it)."""
        self.pending_from = "0"
        self.ready = False
        self.unacked = []  # still pending: reread and acked unrun

    async def create_group(self) -> None:
        try:
            await self.client.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except Exception as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def own_pending(self) -> list[Message]:
        """Entries this name read in an earlier run and never acked, a page per call."""
        if self.pending_from is None:
            return []
        await self.flush()
        found = await self.client.xreadgroup(
            self.group, self.name, {self.stream: self.pending_from}, count=self.batch
        )
        entries = [e for _s, page in found or [] for e in page]
        if not entries:
            self.pending_from = None
            return []
        self.pending_from = id_text(entries[-1][0])
        return [m for m in self._messages(found, None) if m.id not in self.scheduled]

    def _messages(self, found: Any, attempt: int | None) -> list[Message]:
        out = []
        for _stream, entries in found or []:
            for entry_id, fields in entries:
                if fields:  # a pending entry trimmed from the stream has none
                    out.append(message_of(entry_id, fields, attempt))
        return out

    async def due_retries(self) -> list[Message]:
        now = time.monotonic()
        ids: list[str] = []
        while self.retries and self.retries[0][0] <= now and len(ids) < self.batch:
            ids.append(heapq.heappop(self.retries)[1])
        if not ids:
            return []
        await self.flush()
        self.scheduled.difference_update(ids)
        claimed = await self.client.xclaim(self.stream, self.group, self.name, 0, ids)
        return [message_of(i, f) for i, f in claimed if f]

    async def takeovers(self) -> list[Message]:
        """A dead member's entries, idle for claim_idle: XAUTOCLAIM, a page per look."""
        now = time.monotonic()
        if now < self.next_takeover:
            return []
        self.next_takeover = now + self.claim_idle / 2
        await self.flush()
        answer = await self.client.xautoclaim(
            self.stream,
            self.group,
            self.name,
            int(self.claim_idle * 1000),
            start_id=self.autoclaim_from,
            count=self.batch,
        )
        self.autoclaim_from = id_text(answer[0])
        if self.autoclaim_from != "0-0":
            self.next_takeover = now  # more to page through
        gone = answer[2] if len(answer) > 2 else []
        if gone:
            await self.client.xack(self.stream, self.group, *gone)
        return [message_of(i, f) for i, f in answer[1] if f and id_text(i) not in self.scheduled]

    async def fresh(self, block: float, wait: bool = True) -> list[Message]:
        """New entries: in one compact reply while there are some (``message.CompactReader``),
        else waiting up to ``block`` in XREADGROUP for the next (unless not to ``wait``: a
        batch being decided is settled first)."""
        acks, self.unacked = self.unacked, []
        messages = await self.compact.read(self.stream, self.group, self.name, self.batch, acks)
        if messages or not wait:
            return messages
        found = await self.client.xreadgroup(
            self.group,
            self.name,
            {self.stream: ">"},
            count=self.batch,
            block=max(int(block * 1000), 1),
        )
        return self._messages(found, attempt=1)

    async def settle(self, messages: Sequence[Message], verdicts: Sequence[Verdict]) -> None:
        acks: list[str] = []
        for message, verdict in zip(messages, verdicts, strict=True):
            assert message.id is not None
            if isinstance(verdict, Ack):
                acks.append(message.id)
            elif isinstance(verdict, Retry):
                self.schedule(message, verdict)
            else:
                await self.dead_letter(message, verdict)
        self.unacked.extend(acks)  # acked by the next read (see fresh) or flush

    def schedule(self, message: Message, verdict: Retry) -> None:
        assert message.id is not None
        if message.id not in self.scheduled:
            self.scheduled.add(message.id)
            heapq.heappush(self.retries, (time.monotonic() + verdict.delay, message.id))

    async def flush(self) -> None:
        """XACK the settled entries still waiting for a read to carry them."""
        if self.unacked:
            acks, self.unacked = self.unacked, []
            await self.client.xack(self.stream, self.group, *acks)

    async def dead_letter(self, message: Message, verdict: DeadLetter) -> None:
        assert message.id is not None
        async with self.client.pipeline(transaction=True) as pipe:
            pipe.xadd(self.dead_stream, dead_fields(message, verdict.reason))
            pipe.xack(self.stream, self.group, message.id)
            await pipe.execute()

    def wait_for(self, block: float) -> float:
        """How long a read may block: until the next retry is due, at most ``block``."""
        if not self.retries:
            return block
        return max(min(block, self.retries[0][0] - time.monotonic()), 0.001)


async def consume(
    consumer: StreamConsumer,
    url: str,
    *,
    stream: str,
    group: str,
    name: str,
    stop: asyncio.Event,
    batch: int = 100,
    block: float = 0.5,
    claim_idle: float | None = None,
    dead_stream: str | None = None,
    reconnect: Backoff | None = None,
    **options: Any,
) -> None:
    """Consume ``stream`` as member ``name`` of ``group`` until ``stop`` is set; ``options``
    go to ``redis.asyncio.from_url``. A lost connection is retried with ``reconnect`` (a
    bounded exponential backoff, 0.1 s doubling to 5 s, unless given)."""
    if batch < 1:
        raise ConfigurationError(f"batch must be at least 1: {batch!r}")
    # Replies as bytes whatever the options say: an entry's fields are bytes, and a client
    # that decodes them raised on the first field that is not UTF-8, at every read, so one
    # such entry ended consume and held the entries after it.
    client = _redis().from_url(url, **{**options, "decode_responses": False})
    member = _Member(
        client,
        consumer,
        stream,
        group,
        name,
        batch,
        claim_idle if claim_idle is not None else consumer.policy.lease,
        dead_stream if dead_stream is not None else f"{stream}:dead",
    )
    backoff = reconnect if reconnect is not None else Backoff()
    lost = _connection_errors()
    try:
        while not stop.is_set():
            try:
                await member.step(block)
            except Exception as exc:
                if not isinstance(exc, lost) and not _group_gone(exc):
                    raise
                # The pool drops the broken connection and the next command opens a new one.
                await member.abandon_deciding()
                member.connection_lost()
                delay = backoff.failed()
                logs.redis_stream_connection_lost(stream, name, backoff.failures, delay, exc)
                await backoff.wait(delay, stop)
                continue
            if failures := backoff.reset():
                logs.redis_stream_reconnected(stream, name, failures)
        # A batch still being decided is finished; if its dead letters meet a lost
        # connection, its entries stay pending and the next run answers them unrun.
        with contextlib.suppress(*lost):
            await member.settle_deciding()
        settled = len(member.unacked)
        try:
            await member.flush()
        except lost as exc:  # still pending: this name's next run acks them unrun
            logs.redis_stream_left_pending(stream, name, settled, exc)
    finally:
        member.cancel_deciding()
        await client.aclose()


def _connection_errors() -> tuple[type[BaseException], ...]:
    """What a dropped or unreachable server raises: redis-py's own errors once its client
    retries are spent, and the socket's where they escape it."""
    from redis import exceptions

    return (exceptions.ConnectionError, exceptions.TimeoutError, ConnectionError, TimeoutError)


def _group_gone(exc: Exception) -> bool:
    """The server came back without the group (a restart redis-py's reconnect hid): only the
    next read, or the one blocked meanwhile, says so. Handled as a lost connection."""
    from redis import exceptions

    return isinstance(exc, exceptions.ResponseError) and str(exc).startswith(
        ("NOGROUP", "UNBLOCKED")
    )


async def _decide_in_turn(consumer: StreamConsumer, messages: Sequence[Message]) -> list[Verdict]:
    """A batch decided beside the next: its handlers in its turn (mideng.messaging.handlers),
    the next batch's free to start once it is decided, whatever happened."""
    try:
        return await decide(consumer, messages)
    finally:
        handlers_done()
