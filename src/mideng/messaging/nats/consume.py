"""NATS JetStream's adapter: a durable pull consumer feeding an IdempotentConsumer.

    stop = asyncio.Event()
    await nats.consume(consumer, "nats://127.0.0.1:4222", stream="ORDERS",
                       subject="orders.paid", durable="stock", stop=stop)

JetStream redelivers a message until it is acked: after ``ack_wait`` without an answer, after
a nak (with the delay asked for), after the consumer's connection dies. That is at least once;
the consumer's dedup turns it into one effect per business key. Here a fetched message is
acked only after the consumer's verdict (so after the handler's transaction committed), nak'd
with the verdict's delay to come back, or terminated (``term``) when it is dead-lettered, after
a copy went to ``dead_subject`` if one is given. While a handler runs, every message of its
batch is marked ``in_progress()`` each third of ``ack_wait``, so a long handler does not have
its message handed to another consumer meanwhile. The next batch is fetched while one is
being decided and settled (its messages kept alive the same way while they wait), so the
fetch's round trip and the store's overlap. A durable deleted under the consumer is
created again (see ``_Durable``), so consuming goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Sequence
from datetime import datetime
from typing import Any

from mideng.errors import ConfigurationError
from mideng.messaging.consumer import UNDECIDED_DELAY, Consumer, decide, undecided
from mideng.messaging.message import Message
from mideng.messaging.nats.message import DEAD_LETTER_REASON, dead_headers, message_of
from mideng.messaging.reconnect import Backoff
from mideng.messaging.verdict import Ack, DeadLetter, Retry, Verdict
from mideng.observability import logs
from mideng.stores.registry import require

#: Seconds between looks at the durable while fetches keep finding messages (it is looked at
#: after every fetch that finds none).
LOOK_INTERVAL = 30.0


async def consume(
    consumer: Consumer,
    url: str,
    *,
    stream: str,
    subject: str,
    durable: str,
    stop: asyncio.Event,
    batch: int = 1,
    fetch_timeout: float = 1.0,
    ack_wait: float = 30.0,
    max_ack_pending: int | None = None,
    dead_subject: str | None = None,
    reconnect: Backoff | None = None,
    **options: Any,
) -> None:
    """Consume ``subject`` of ``stream`` through the durable pull consumer ``durable`` until
    ``stop`` is set; the batch in hand is finished first.

    The durable is used as it is when it exists (its ``ack_wait`` and limits stay); otherwise
    it is created with explicit acks, ``ack_wait`` and ``max_ack_pending``, filtered on
    ``subject``. The stream must exist. A durable deleted while consuming is created again,
    starting after the ack floor it was last seen at; a stream deleted ends the call with
    ConfigurationError. ``batch`` messages are fetched at a time (more than one
    go to ``handle_batch``: one store round trip for the lot). ``options`` go to
    ``nats.connect`` (``user``, ``password``, ``tls`` ...).

    nats-py reconnects by itself (``max_reconnect_attempts``, 60 by default, 2 s apart); once
    it gives up, or the server cannot be reached at all, the adapter connects a new client
    after ``reconnect`` (a bounded exponential backoff, 0.1 s doubling to 5 s, unless given;
    ``stop`` cuts it short).
    """
    if batch < 1:
        raise ConfigurationError(f"batch must be at least 1: {batch!r}")
    if not fetch_timeout > 0:
        raise ConfigurationError(f"fetch_timeout must be positive seconds: {fetch_timeout!r}")
    nats = require("nats", "nats")
    errors = require("nats.errors", "nats")
    backoff = reconnect if reconnect is not None else Backoff()
    lost = (errors.ConnectionClosedError, errors.NoServersError, OSError)
    pull = _Durable(stream, subject, durable, ack_wait, max_ack_pending)
    ahead = _Ahead()
    fetching = (batch, fetch_timeout, stop)
    while True:  # the first connection binds the durable even when stop is already set
        try:
            client = await nats.connect(url, **options)
        except lost as exc:
            await _lost(pull.name, backoff, stop, exc)
            if stop.is_set():
                return
            continue
        try:
            jetstream = client.jetstream()
            await pull.bind(jetstream)
            subscription = await jetstream.pull_subscribe_bind(durable=pull.name, stream=stream)
            if failures := backoff.reset():
                logs.nats_reconnected(pull.name, failures)
            while not stop.is_set():
                if ahead.running():
                    fetched, keeper = await ahead.take()
                else:
                    fetched, keeper = await _next(pull, jetstream, subscription, *fetching), None
                if not fetched:
                    continue
                if stop.is_set():
                    # Fetched while the batch before was decided, after the stop: not started,
                    # handed straight back (redelivered now rather than after ack_wait).
                    await _hand_back(fetched, keeper)
                    break
                # The next batch is fetched while this one is decided and settled.
                ahead.start(_next(pull, jetstream, subscription, *fetching), pull.ack_wait)
                await _process(consumer, jetstream, fetched, pull.ack_wait, dead_subject, keeper)
            await ahead.cancel()
            await client.flush()
            return
        except lost as exc:
            # What was fetched and not acked is redelivered after ack_wait; a finished one is
            # acked without running again.
            await _lost(pull.name, backoff, stop, exc)
        finally:
            await ahead.cancel()
            await client.close()
        if stop.is_set():
            return


async def _next(
    pull: _Durable,
    jetstream: Any,
    subscription: Any,
    batch: int,
    timeout: float,
    stop: asyncio.Event,
) -> list[Any]:
    """The next batch; none after a fetch that failed (and a pause) or found nothing."""
    errors = require("nats.errors", "nats")
    try:
        if pull.due():
            await pull.look(jetstream)
        fetched = await _fetch(subscription, batch, timeout)
    except errors.ConnectionClosedError:
        raise  # nats-py gave up reconnecting: a new client, after the backoff
    except errors.Error as exc:
        # Reconnecting, a JetStream API blip: nothing was handed out, so just wait.
        logs.nats_fetch_failed(pull.name, exc)
        await _pause(stop, timeout)
        return []
    if not fetched:
        # Nothing to hand out, or no durable left to hand it out: a deleted one answers no
        # fetch, and only a look tells the two apart.
        pull.look_before_next_fetch()
    return fetched


async def _fetch(subscription: Any, batch: int, timeout: float) -> list[Any]:
    """The next messages; none when none came within ``timeout`` seconds (nats-py raises its
    own TimeoutError for that, or a bare asyncio one from inside fetch)."""
    errors = require("nats.errors", "nats")
    try:
        return list(await subscription.fetch(batch, timeout=timeout))
    except (errors.TimeoutError, asyncio.TimeoutError):
        return []


async def _lost(durable: str, backoff: Backoff, stop: asyncio.Event, exc: BaseException) -> None:
    delay = backoff.failed()
    logs.nats_connection_lost(durable, backoff.failures, delay, exc)
    await backoff.wait(delay, stop)


class _Durable:
    """The durable pull consumer as this consumer last saw it, looked at again after a quiet
    fetch (a deleted durable answers no fetch: nothing says it is gone but a look) and at
    least every ``LOOK_INTERVAL`` seconds, and created again when it is gone.

    A durable created here starts after the floor the durable was last seen at: every
    message up to it was acked (or before the durable's start), and the stream may hold far
    more. From the stream's start the consumer would be handed messages whose records have
    expired since they ran, and run them again. A first durable, or one on a stream deleted
    and made again (its sequences start over), starts at the stream's start."""

    def __init__(
        self, stream: str, subject: str, name: str, ack_wait: float, max_ack_pending: int | None
    ) -> None:
        self.stream, self.subject, self.name = stream, subject, name
        self.wanted_ack_wait, self.max_ack_pending = ack_wait, max_ack_pending
        self.ack_wait = ack_wait  # the durable's own, once seen
        self.floor = 0  # a stream sequence: every message up to it is done with, as last seen
        self.stream_created: datetime | None = None  # the stream of that name the floor is of
        self.seen = False
        self.next_look = 0.0  # on the loop's clock

    def due(self) -> bool:
        return asyncio.get_running_loop().time() >= self.next_look

    def look_before_next_fetch(self) -> None:
        self.next_look = 0.0

    async def bind(self, jetstream: Any) -> None:
        """On a new connection: the stream must exist; then the durable is looked at."""
        await self._see_stream(jetstream)
        await self.look(jetstream)

    async def look(self, jetstream: Any) -> None:
        """Read the durable, creating it when there is none; refuse one that can't serve."""
        js_errors = require("nats.js.errors", "nats")
        try:
            info = await jetstream.consumer_info(self.stream, self.name)
        except js_errors.NotFoundError:
            info = await self._create(jetstream)
        config = info.config
        self._check(config)
        self.ack_wait = float(config.ack_wait or self.wanted_ack_wait)
        # A durable made to start at a sequence shows no ack floor until its first ack.
        self.floor = max(int(info.ack_floor.stream_seq or 0), (config.opt_start_seq or 1) - 1)
        self.seen = True
        self.next_look = asyncio.get_running_loop().time() + LOOK_INTERVAL

    async def _see_stream(self, jetstream: Any) -> None:
        js_errors = require("nats.js.errors", "nats")
        try:
            info = await jetstream.stream_info(self.stream)
        except js_errors.NotFoundError as exc:
            raise ConfigurationError(f"JetStream stream {self.stream!r} does not exist") from exc
        if info.created != self.stream_created:
            self.floor, self.stream_created = 0, info.created

    async def _create(self, jetstream: Any) -> Any:
        api = require("nats.js.api", "nats")
        js_errors = require("nats.js.errors", "nats")
        await self._see_stream(jetstream)
        config = api.ConsumerConfig(
            durable_name=self.name,
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=self.wanted_ack_wait,
            max_ack_pending=self.max_ack_pending,
            filter_subject=self.subject,
            **self._start(api),
        )
        if self.seen:
            logs.nats_durable_created_again(self.name, self.stream, self.floor + 1)
        try:
            # Two consumers creating it together with one config: accepted twice.
            return await jetstream.add_consumer(self.stream, config)
        except js_errors.APIError:
            # Created first by another consumer that saw another floor (the server refuses to
            # change a start): that one is used as it is.
            with contextlib.suppress(js_errors.NotFoundError):
                return await jetstream.consumer_info(self.stream, self.name)
            raise

    def _start(self, api: Any) -> dict[str, Any]:
        """Where a durable created now starts: after the floor last seen, else (none seen) at
        the stream's start."""
        if not self.floor:
            return {}
        start = api.DeliverPolicy.BY_START_SEQUENCE
        return {"deliver_policy": start, "opt_start_seq": self.floor + 1}

    def _check(self, config: Any) -> None:
        if config.deliver_subject:
            raise ConfigurationError(
                f"durable {self.name!r} is a push consumer; a pull one is needed"
            )
        filters = config.filter_subjects or (
            [config.filter_subject] if config.filter_subject else []
        )
        if filters and self.subject not in filters:
            raise ConfigurationError(
                f"durable {self.name!r} filters {filters}, not {self.subject!r}: bind to it "
                "with its own subject or use another durable"
            )


async def _keep_alive(fetched: Sequence[Any], ack_wait: float) -> None:
    """Reset the redelivery clock of every message in hand until cancelled."""
    while True:
        await asyncio.sleep(ack_wait / 3)
        for raw in fetched:
            with contextlib.suppress(Exception):  # a lost one is redelivered, and deduped
                await raw.in_progress()


class _Ahead:
    """The next batch, fetched while one is decided and settled: the fetch's round trip
    overlaps the store's. Its messages are kept alive from their arrival (they may wait for
    the batch before them); a batch's handlers still start only once the batch before it is
    settled, one batch at a time, in order."""

    def __init__(self) -> None:
        self.task: asyncio.Future[list[Any]] | None = None
        self.keeper: asyncio.Future[None] | None = None

    def running(self) -> bool:
        return self.task is not None

    def start(self, fetch: Awaitable[list[Any]], ack_wait: float) -> None:
        def arrived(task: asyncio.Future[list[Any]]) -> None:
            if not task.cancelled() and task.exception() is None and task.result():
                self.keeper = asyncio.ensure_future(_keep_alive(task.result(), ack_wait))

        self.task = asyncio.ensure_future(fetch)
        self.task.add_done_callback(arrived)

    async def take(self) -> tuple[list[Any], asyncio.Future[None] | None]:
        """The fetched batch (raising what its fetch raised) and its keeper."""
        task, self.task = self.task, None
        assert task is not None
        try:
            fetched = await task
        finally:
            keeper, self.keeper = self.keeper, None
        return fetched, keeper

    async def cancel(self) -> None:
        """Stop a fetch still waiting; a batch it already has goes back to the broker."""
        task, self.task = self.task, None
        if task is None:
            return
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        keeper, self.keeper = self.keeper, None
        if not task.cancelled() and task.exception() is None:
            await _hand_back(task.result(), keeper)


async def _hand_back(fetched: Sequence[Any], keeper: asyncio.Future[None] | None) -> None:
    if keeper is not None:
        keeper.cancel()
    for raw in fetched:
        with contextlib.suppress(Exception):  # a lost one is redelivered after ack_wait
            await raw.nak()


async def _process(
    consumer: Consumer,
    jetstream: Any,
    fetched: Sequence[Any],
    ack_wait: float,
    dead_subject: str | None,
    keeper: asyncio.Future[None] | None = None,
) -> None:
    """Decide a batch and settle it; ``keeper`` keeps its messages alive (one is started
    when none was, from the fetch on)."""
    messages = [message_of(raw) for raw in fetched]
    if keeper is None:
        keeper = asyncio.ensure_future(_keep_alive(fetched, ack_wait))
    try:
        verdicts = await decide(consumer, messages)
    except Exception as exc:
        # Not even a verdict (the store is down): every message comes back later, none is lost.
        logs.nats_messages_unhandled(len(messages), exc)
        verdicts = undecided(messages)
    finally:
        keeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeper
    for message, verdict in zip(messages, verdicts, strict=True):
        try:
            await _settle(jetstream, message, verdict, dead_subject)
        except Exception as exc:
            # The rest of the batch is still settled; this one comes back after ack_wait and
            # the consumer's record answers it.
            logs.nats_settle_failed(message.id, exc)


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def _settle(
    jetstream: Any, message: Message, verdict: Verdict, dead_subject: str | None
) -> None:
    raw = message.raw
    if isinstance(verdict, Ack):
        await raw.ack()
    elif isinstance(verdict, Retry):
        await raw.nak(delay=verdict.delay)
    elif isinstance(verdict, DeadLetter):
        if dead_subject is not None:
            headers = dead_headers(raw.headers or {})
            headers[DEAD_LETTER_REASON] = verdict.reason
            try:
                await jetstream.publish(dead_subject, message.body, headers=headers)
            except Exception as exc:
                # Never terminated without its copy: it comes back and is dead-lettered again.
                logs.nats_dead_letter_copy_failed(dead_subject, message.id, exc)
                await raw.nak(delay=UNDECIDED_DELAY)
                return
        logs.nats_message_dead_lettered(message.id, verdict.reason)
        await raw.term()
    else:
        raise TypeError(f"not a verdict: {verdict!r}")
