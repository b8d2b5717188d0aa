"""The service's settings, read from the environment once (README.md lists them)."""

from __future__ import annotations

import os

#: The business tables, mideng's records and the outbox: one PostgreSQL database.
DATABASE_URL = os.environ.get("SHOP_DATABASE_URL", "postgresql+psycopg://root@127.0.0.1:5432/test")
AMQP_URL = os.environ.get("SHOP_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
#: The topic exchange the relay publishes order events to, and the two services' queues.
EXCHANGE = os.environ.get("SHOP_EXCHANGE", "shop.orders")
STOCK_QUEUE = os.environ.get("SHOP_STOCK_QUEUE", "shop.stock")
NOTIFY_QUEUE = os.environ.get("SHOP_NOTIFY_QUEUE", "shop.notify")
#: Seconds a consumer holds a message's record before a live heartbeat renews it; a consumer
#: killed mid-operation is taken over once it ran out.
LEASE = float(os.environ.get("SHOP_LEASE", "30"))
