from __future__ import annotations

from typing import Any

from mideng.messaging.headers import IDEMPOTENCY_KEY
from tests.brokers import BrokerNames, broker_names  # noqa: F401  (fixture)
from tests.services import REDIS_URL


class StreamSide:
    """A fresh stream and the consumer group the storm's consumers share, one name a slot."""

    broker = "redis_streams"
    url = REDIS_URL
    lease = 2.0  # a killed member's pending entries are taken over once idle this long

    def __init__(self, names: BrokerNames, batch: int = 20) -> None:
        found = names.redis_stream()
        self.stream, self.group, self.dead = found.stream, found.group, found.dead
        self.batch = batch

    def adapter(self, slot: int = 0) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "group": self.group,
            "name": f"member-{slot}",
            "batch": self.batch,
            "block": 0.2,
        }

    def client(self) -> Any:
        import redis

        return redis.Redis.from_url(self.url)

    def publish(self, messages: list[tuple[str, bytes]]) -> None:
        client = self.client()
        try:
            pipe = client.pipeline(transaction=False)
            for key, body in messages:
                pipe.xadd(self.stream, {"body": body, IDEMPOTENCY_KEY: key})
            pipe.execute()
        finally:
            client.close()

    def group_info(self) -> dict[str, Any] | None:
        client = self.client()
        try:
            groups = client.xinfo_groups(self.stream)
        finally:
            client.close()
        mine = [g for g in groups if g["name"].decode() == self.group]
        return mine[0] if mine else None

    def settled(self) -> bool:
        info = self.group_info()
        return info is not None and info["pending"] == 0 and info["lag"] == 0

    def state(self) -> str:
        info = self.group_info()
        return "no group" if info is None else f"{info['pending']} pending, lag {info['lag']}"
