"""The in-process broker: destination = queue, the message id kept as the message's id.

The broker has the message once ``publish`` returns (it is in this process's memory). It
drops no duplicate: a message published twice (a relay that published a row, then lost the
confirm) is delivered twice, and the consumer's dedup answers the second.
"""

from __future__ import annotations

from mideng.messaging.in_process import InProcessBroker, named
from mideng.messaging.publish import Outgoing


class MemoryPublisher:
    """Publishes to the broker a ``memory://name`` URL names, in this process. ``timeout``
    is taken as every publisher takes it (the relay gives one); a put never waits."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url
        self.timeout = timeout
        self._broker: InProcessBroker = named(url)  # a bad URL fails here, not at a publish

    async def start(self) -> None:
        """Nothing to connect to: the broker is in this process."""

    async def publish(self, message: Outgoing) -> None:
        self._broker.put(message.destination, message.body, message.headers, message.message_id)

    async def close(self) -> None:
        """Nothing to close; the queues stay for the consumers."""
