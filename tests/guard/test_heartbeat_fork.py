"""Fork safety: a child forked from a process with a running heartbeat thread renews too."""

from __future__ import annotations

import inspect
import multiprocessing
import threading
import time
from multiprocessing.synchronize import Event
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mideng import Guard
from mideng.core.keys import bind, fast_binder
from mideng.errors import InProgressError
from mideng.stores.sqlite import SQLiteStore


def _signal_then_wait(signal: Event | threading.Event, wait: Event | threading.Event) -> bool:
    signal.set()
    return wait.wait(30)


def _child_holds(guard: Guard, started: Event, finish: Event) -> None:
    # The Guard (and its heartbeat timer) were made in the parent before the fork.
    guard.run("fork", "child", _signal_then_wait, started, finish)


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")
def test_forked_child_keeps_renewing(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    guard = Guard(SQLiteStore(path), lease=0.6)
    release, holding = threading.Event(), threading.Event()
    parent = threading.Thread(
        target=lambda: guard.run("fork", "parent", _signal_then_wait, holding, release)
    )
    parent.start()
    assert holding.wait(30)  # the parent's heartbeat timer is running when it forks
    ctx = multiprocessing.get_context("fork")
    started, finish = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_child_holds, args=(guard, started, finish))
    child.start()
    try:
        assert started.wait(30)
        time.sleep(1.8)  # three leases: only a renewing child still owns its key
        with pytest.raises(InProgressError):
            guard.run("fork", "child", lambda: "stolen")
    finally:
        finish.set()
        release.set()
        child.join(30)
        parent.join(30)
    assert child.exitcode == 0


def _sig(a: int, b: str = "x", *, c: float = 1.0) -> None: ...


@given(
    st.lists(st.integers(), max_size=4),
    st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(), max_size=3),
)
def test_fast_binder_agrees_with_inspect(args: list[int], kwargs: dict[str, int]) -> None:
    signature = inspect.signature(_sig)
    fast = fast_binder(signature)
    try:
        expected = bind(signature, tuple(args), kwargs)
    except TypeError:
        with pytest.raises(TypeError):
            fast(tuple(args), kwargs)
        return
    assert fast(tuple(args), kwargs) == expected
