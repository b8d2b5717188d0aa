"""running_loop() is asyncio.get_running_loop() without its getpid() system call: the same loop
in every thread and after every loop change, RuntimeError outside a loop, and in a child forked
while a loop ran, asyncio's own refusal of the parent's loop."""

from __future__ import annotations

import asyncio
import os
import threading

import pytest

from mideng.core import event_loop
from mideng.core.event_loop import running_loop


def test_it_is_the_running_loop_of_each_asyncio_run() -> None:
    async def both() -> tuple[asyncio.AbstractEventLoop, asyncio.AbstractEventLoop]:
        return running_loop(), asyncio.get_running_loop()

    seen = []
    for _ in range(3):  # a new loop each time, in this thread: the one asked for last is stale
        mine, theirs = asyncio.run(both())
        assert mine is theirs
        seen.append(mine)
    assert len({id(loop) for loop in seen}) == 3


def test_outside_a_loop_it_raises_as_asyncio_does() -> None:
    async def ask() -> asyncio.AbstractEventLoop:
        return running_loop()

    asyncio.run(ask())  # the last loop asked for is this thread's, now stopped
    with pytest.raises(RuntimeError):
        running_loop()


def test_threads_running_loops_at_once_each_get_their_own() -> None:
    wrong: list[str] = []
    barrier = threading.Barrier(6)

    async def asks() -> None:
        barrier.wait()
        own = asyncio.get_running_loop()
        for n in range(2000):
            if running_loop() is not own:
                wrong.append(threading.current_thread().name)
            if n % 50 == 0:
                await asyncio.sleep(0)  # let the other threads' loops replace the one kept

    threads = [threading.Thread(target=asyncio.run, args=(asks(),)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def test_asyncio_is_asked_once_per_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    real = asyncio.get_running_loop

    def counting() -> asyncio.AbstractEventLoop:
        asked.append(1)
        return real()

    monkeypatch.setattr(event_loop, "_get_running_loop", counting)

    async def many() -> None:
        for _ in range(100):
            assert running_loop() is real()

    asyncio.run(many())
    assert len(asked) == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_child_forked_while_a_loop_runs_is_refused_the_parents_loop() -> None:
    async def fork() -> tuple[int, int]:
        running_loop()  # kept
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: asyncio refuses it the parent's loop, and so must this
            try:
                running_loop()
                answer = b"parent's loop"
            except RuntimeError:
                answer = b"refused"
            except BaseException:
                answer = b"error"
            os.write(write, answer)
            os._exit(0)
        os.close(write)
        return pid, read

    pid, read = asyncio.run(fork())
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as f:
        answer = f.read()
    assert status == 0
    assert answer == b"refused"


def test_to_thread_runs_in_the_default_executor_in_a_copy_of_the_context() -> None:
    import contextvars

    from mideng.core.event_loop import to_thread

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    def where(tag: str) -> tuple[str, int, str]:
        seen = var.get()
        var.set("changed in the thread")  # a copy's: the caller's context keeps its value
        return tag, threading.get_ident(), seen

    def fails() -> None:
        raise KeyError("from the thread")

    async def main() -> None:
        var.set("the caller's")
        tag, ident, seen = await to_thread(where, "t")
        assert (tag, seen) == ("t", "the caller's")
        assert ident != threading.get_ident()
        assert var.get() == "the caller's"
        with pytest.raises(KeyError, match="from the thread"):
            await to_thread(fails)

    asyncio.run(main())
