"""Per-call options of ``run`` / ``arun``, and payloads that have no canonical form."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mideng import Guard
from mideng.errors import ConfigurationError, KeyMissingError
from tests.runner import Runner


def _recursive() -> list[Any]:
    loop: list[Any] = [1]
    loop.append(loop)
    return loop


def _deep() -> list[Any]:
    value: list[Any] = []
    for _ in range(100_000):
        value = [value]
    return value


UNSPELLABLE = {
    "contains itself": _recursive,
    "nests too deeply": _deep,
    "lone surrogate": lambda: {"name": "order-\ud800"},
}


@pytest.mark.parametrize("make", UNSPELLABLE.values(), ids=list(UNSPELLABLE))
def test_a_payload_without_canonical_form_is_a_configuration_error(
    make: Any, runner: Runner, opened: Any
) -> None:
    guard = Guard(opened.store)
    runs: list[int] = []
    with pytest.raises(ConfigurationError, match="payload can't be fingerprinted"):
        runner.call(guard, "pay", "k", lambda: runs.append(1), payload=make())
    assert runs == []
    assert guard.get("pay", "k") is None  # nothing was stored either


def test_a_key_hashed_from_unspellable_arguments_asks_for_key() -> None:
    guard = Guard("memory://")
    runs: list[int] = []

    @guard.idempotent("pay")
    def pay(order: Any) -> None:
        runs.append(1)

    with pytest.raises(KeyMissingError, match="pass key="):
        pay(_recursive())
    assert runs == []


def test_run_takes_a_policy_for_one_call() -> None:
    guard = Guard("memory://")
    calls: list[int] = []

    def refuse() -> None:
        calls.append(1)
        raise ValueError("card declined")

    # Default policy releases: the retry runs again.
    for _ in range(2):
        with pytest.raises(ValueError, match="declined"):
            guard.run("pay", "released", refuse)
    assert len(calls) == 2
    # One call with on_error="record": its failure is kept and replayed.
    calls.clear()
    for _ in range(3):
        with pytest.raises(ValueError, match="declined"):
            guard.run("pay", "recorded", refuse, policy={"on_error": "record"})
    assert calls == [1]
    # A Policy object works the same, and the scope's own policy is untouched.
    policy = guard.policy("pay", on_error="record")
    with pytest.raises(ValueError, match="declined"):
        guard.run("pay", "as-policy", refuse, policy=policy)
    assert guard.get("pay", "as-policy") is not None
    assert guard.policy("pay").on_error.value == "release"


def test_arun_takes_a_policy_for_one_call() -> None:
    guard = Guard("memory://")
    calls: list[int] = []

    async def refuse() -> None:
        calls.append(1)
        raise ValueError("card declined")

    async def scenario() -> None:
        for _ in range(3):
            with pytest.raises(ValueError, match="declined"):
                await guard.arun("pay", "recorded", refuse, policy={"on_error": "record"})

    asyncio.run(scenario())
    assert calls == [1]


def test_a_bad_policy_is_refused_before_anything_runs() -> None:
    guard = Guard("memory://")
    runs: list[int] = []
    with pytest.raises(ConfigurationError, match="unknown option"):
        guard.run("pay", "k", lambda: runs.append(1), policy={"on_eror": "record"})
    with pytest.raises(ConfigurationError, match="Policy or a mapping"):
        guard.run("pay", "k", lambda: runs.append(1), policy="record")  # type: ignore[arg-type]
    assert runs == []


def test_other_keywords_still_reach_the_body() -> None:
    guard = Guard("memory://")

    def body(on_error: str, lease: int) -> str:
        return f"{on_error}/{lease}"

    assert guard.run("pay", "k", body, on_error="mine", lease=3) == "mine/3"
