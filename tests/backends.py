"""The store matrix, as data: every contract, race and crash test runs over these.

``make(ctx)`` returns a fresh, isolated store and the URL (plus options) that another process
opens to reach the same records. Server stores join this list with their own entries.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mideng.stores.base import Store
from mideng.stores.memory import MemoryStore
from mideng.stores.sqlite import SQLiteStore


@dataclass
class Ctx:
    tmp: Path
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    cleanups: list[Callable[[], None]] = field(default_factory=list)


@dataclass(frozen=True)
class Opened:
    store: Store
    url: str | None  # None: not reachable from another process (memory)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Backend:
    name: str
    make: Callable[[Ctx], Opened]
    service: str | None = None  # a name from tests/services.py
    shared: bool = True  # reachable from other processes


def _memory(ctx: Ctx) -> Opened:
    return Opened(MemoryStore(), None)


def _sqlite(ctx: Ctx) -> Opened:
    path = ctx.tmp / f"mideng-{ctx.suffix}.db"
    return Opened(SQLiteStore(str(path)), f"sqlite:///{path}")


def _discover() -> list[Backend]:
    """Server stores live in tests/backends_<name>.py, each exporting BACKENDS."""
    found: list[Backend] = []
    for path in sorted(Path(__file__).parent.glob("backends_*.py")):
        module = importlib.import_module(f"tests.{path.stem}")
        found.extend(module.BACKENDS)
    return found


BACKENDS: list[Backend] = [
    Backend("memory", _memory, shared=False),
    Backend("sqlite", _sqlite),
    *_discover(),
]


def by_name(name: str) -> Backend:
    return next(b for b in BACKENDS if b.name == name)


def opened_store(name: str, ctx: Ctx) -> Iterator[Store]:
    """A store fixture's body: backend ``name``'s store (its service required), closed after."""
    from tests.services import need

    backend = by_name(name)
    if backend.service is not None:
        need(backend.service)
    opened = backend.make(ctx)
    yield opened.store
    opened.store.close()
