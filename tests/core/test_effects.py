"""mideng.core.effects: one procedure, carried out by a blocking loop and by an awaiting one."""

from __future__ import annotations

import asyncio

import pytest

from mideng.core import effects
from mideng.core.effects import Effects


class Counter:
    """A thing with a sync and an async twin of each operation, recording what was called."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.value = 0
        self.gate: asyncio.Event | None = None

    def add(self, n: int) -> int:
        self.calls.append(f"add({n})")
        if n < 0:
            raise ValueError("negative")
        self.value += n
        return self.value

    async def aadd(self, n: int) -> int:
        if self.gate is not None:
            await self.gate.wait()
        return self.add(n)


def total(counter: Counter, amounts: list[int]) -> Effects[tuple[int, list[str]]]:
    """Adds each amount; a refused one is noted and the rest go on."""
    refused: list[str] = []
    last = 0
    for n in amounts:
        try:
            last = yield effects.call(counter.add, counter.aadd, n)
        except ValueError as exc:
            refused.append(f"{n}: {exc}")
    return last, refused


def test_run_sends_answers_and_throws_errors_in() -> None:
    counter = Counter()
    assert effects.run(total(counter, [1, -2, 3])) == (4, ["-2: negative"])
    assert counter.calls == ["add(1)", "add(-2)", "add(3)"]


def test_arun_does_the_same_awaited() -> None:
    counter = Counter()
    assert asyncio.run(effects.arun(total(counter, [1, -2, 3]))) == (4, ["-2: negative"])
    assert counter.calls == ["add(1)", "add(-2)", "add(3)"]


def test_an_error_the_procedure_does_not_handle_leaves_both_loops_unchanged() -> None:
    def strict(counter: Counter) -> Effects[int]:
        answer: int = yield effects.call(counter.add, counter.aadd, -1)
        return answer

    with pytest.raises(ValueError, match="negative"):
        effects.run(strict(Counter()))
    with pytest.raises(ValueError, match="negative"):
        asyncio.run(effects.arun(strict(Counter())))


def test_a_procedure_with_no_effect_returns_at_once() -> None:
    def none(needed: bool) -> Effects[str]:
        if needed:  # never: a generator that yields nothing
            yield effects.pause(0)
        return "done"

    assert effects.run(none(False)) == "done"
    assert asyncio.run(effects.arun(none(False))) == "done"


def test_an_interrupt_is_thrown_in_and_passes_a_procedure_that_handles_only_errors() -> None:
    seen: list[str] = []

    def interrupted() -> Effects[None]:
        try:
            yield effects.call(_interrupt, _ainterrupt)
        except Exception:  # pragma: no cover - an interrupt is not an error
            seen.append("handled as an error")
        except KeyboardInterrupt:
            seen.append("interrupted at the call")
            raise
        finally:
            seen.append("left")

    with pytest.raises(KeyboardInterrupt):
        effects.run(interrupted())
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(effects.arun(interrupted()))
    assert seen == ["interrupted at the call", "left"] * 2


def _interrupt() -> None:
    raise KeyboardInterrupt


async def _ainterrupt() -> None:
    raise KeyboardInterrupt


def test_a_cancellation_is_thrown_in_where_the_procedure_awaited() -> None:
    counter = Counter()
    seen: list[str] = []

    def cancellable() -> Effects[None]:
        try:
            yield effects.call(counter.add, counter.aadd, 1)
        except asyncio.CancelledError:
            seen.append("cancelled at the add")
            raise

    async def main() -> None:
        counter.gate = asyncio.Event()
        task = asyncio.create_task(effects.arun(cancellable()))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == ["cancelled at the add"]
    assert counter.calls == []


def test_a_shielded_effect_runs_to_its_end_then_the_cancellation_is_thrown_in() -> None:
    counter = Counter()
    seen: list[str] = []

    def finishing() -> Effects[None]:
        try:
            yield effects.shielded(effects.call(counter.add, counter.aadd, 5))
        except asyncio.CancelledError:
            seen.append(f"cancelled after the add, value {counter.value}")
            raise

    async def main() -> None:
        counter.gate = asyncio.Event()
        task = asyncio.create_task(effects.arun(finishing()))
        await asyncio.sleep(0.01)
        task.cancel()  # twice: both held until the write is done
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.01)
        assert not task.done()
        counter.gate.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert seen == ["cancelled after the add, value 5"]
    assert effects.run(finishing()) is None  # from run, a shielded effect is any other


def test_pause_sleeps_in_both_loops() -> None:
    def napping() -> Effects[str]:
        yield effects.pause(0.001)
        return "rested"

    assert effects.run(napping()) == "rested"
    assert asyncio.run(effects.arun(napping())) == "rested"
