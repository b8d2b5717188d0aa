"""Where the cases find their servers: the test suite's addresses on 127.0.0.1, overridden by
the same environment variables, and whether one answers."""

from __future__ import annotations

import os
import socket

POSTGRES_URL = os.environ.get(
    "MIDENG_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
MYSQL_URL = os.environ.get("MIDENG_TEST_MYSQL", "mysql+pymysql://root:@127.0.0.1:3306/test")
REDIS_URL = os.environ.get("MIDENG_TEST_REDIS", "redis://127.0.0.1:6379/0")
AMQP_URL = os.environ.get("MIDENG_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/")

PORTS = {"postgresql": 5432, "mysql": 3306, "redis": 6379, "rabbitmq": 5672}


def reachable(name: str) -> bool:
    """Whether the server ``name`` (a key of PORTS) accepts a connection on 127.0.0.1."""
    try:
        with socket.create_connection(("127.0.0.1", PORTS[name]), timeout=1.0):
            return True
    except OSError:
        return False
