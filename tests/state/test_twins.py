"""Every primitive that does I/O has its async twin, taking the same arguments; both are thin
calls of one operation builder (the statements are written once, in mideng.state.ops)."""

from __future__ import annotations

import inspect

import mideng.state
from mideng.state import StateMachine

NO_IO = {"allowed", "reachable", "sources"}


def test_every_primitive_has_an_async_twin_with_the_same_signature() -> None:
    functions = {
        name: getattr(mideng.state, name)
        for name in mideng.state.__all__
        if inspect.isfunction(getattr(mideng.state, name))
    }
    sync = {n for n, f in functions.items() if not inspect.iscoroutinefunction(f)}
    assert sync == {"insert_once", "decrement", "update_versioned", "update_fenced"}
    for name in sync:
        twin = functions[f"a{name}"]
        assert inspect.iscoroutinefunction(twin)
        assert inspect.signature(twin).parameters == inspect.signature(functions[name]).parameters


def test_every_machine_operation_has_an_async_twin() -> None:
    public = {n for n, v in vars(StateMachine).items() if callable(v) and not n.startswith("_")}
    assert public - NO_IO == {"advance", "aadvance"}
    sync = inspect.signature(StateMachine.advance).parameters
    assert inspect.signature(StateMachine.aadvance).parameters == sync
    assert inspect.iscoroutinefunction(StateMachine.aadvance)
