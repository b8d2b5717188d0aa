"""A policy refuses values it would misread. ``fail_open`` and ``heartbeat`` were taken by
truth value, so ``fail_open="false"`` (a setting read from an environment variable or a
config file) ran bodies unguarded whenever the store was down, and ``heartbeat="off"``
renewed; a ttl that is not a number failed with a bare TypeError, and ``lease=True`` was a
one-second lease."""

from __future__ import annotations

from typing import Any

import pytest

from mideng import Guard
from mideng.core.policy import Policy
from mideng.errors import ConfigurationError
from mideng.stores.memory import MemoryStore


@pytest.mark.parametrize(
    "options",
    [
        {"fail_open": "false"},
        {"fail_open": 0},
        {"fail_open": None},
        {"heartbeat": "off"},
        {"heartbeat": 1},
        {"ttl": "60"},
        {"ttl": True},
        {"lease": True},
        {"wait_timeout": False},
        {"max_attempts": True},
    ],
)
def test_a_value_the_policy_would_misread_is_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match=next(iter(options))):
        Policy(**options)
    with pytest.raises(ConfigurationError):
        Guard(MemoryStore(), **options)
    with pytest.raises(ConfigurationError):
        Guard(MemoryStore()).run("policy-values", "k", lambda: 1, policy=options)


def test_the_values_a_policy_takes() -> None:
    policy = Policy(fail_open=True, heartbeat=False, ttl=None, lease=2, wait_timeout=0.5)
    assert (policy.fail_open, policy.heartbeat, policy.ttl, policy.lease) == (True, False, None, 2)
    assert Policy(ttl=10).ttl == 10
