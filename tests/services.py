"""Real services the tests talk to; absent ones skip, unless MIDENG_REQUIRE_SERVICES=1."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

SERVICES = {
    "postgresql": ("127.0.0.1", 5432),
    "mysql": ("127.0.0.1", 3306),
    "redis": ("127.0.0.1", 6379),
    "rabbitmq": ("127.0.0.1", 5672),
    "nats": ("127.0.0.1", 4222),
}

POSTGRES_URL = os.environ.get(
    "MIDENG_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
MYSQL_URL = os.environ.get("MIDENG_TEST_MYSQL", "mysql+pymysql://root:@127.0.0.1:3306/test")
REDIS_URL = os.environ.get("MIDENG_TEST_REDIS", "redis://127.0.0.1:6379/0")


def required() -> bool:
    return os.environ.get("MIDENG_REQUIRE_SERVICES") == "1"


def reachable(name: str) -> bool:
    host, port = SERVICES[name]
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def sql_url(family: str, sqlite_file: Path) -> str:
    """A database of ``family`` (``sqlite``, ``postgresql``, ``mysql``): SQLite in that file,
    the servers needed (skipped when down)."""
    if family == "sqlite":
        return f"sqlite:///{sqlite_file}"
    need(family)
    return POSTGRES_URL if family == "postgresql" else MYSQL_URL


def need(name: str) -> None:
    """Skip (or, under MIDENG_REQUIRE_SERVICES=1, fail) when a service is down."""
    if reachable(name):
        return
    host, port = SERVICES[name]
    message = f"{name} is not reachable at {host}:{port}"
    if required():
        pytest.fail(message + " and MIDENG_REQUIRE_SERVICES=1")
    pytest.skip(message)
