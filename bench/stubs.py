"""Database cursors that answer at once, for counting a call's Python without a driver's."""

from __future__ import annotations

from typing import Any


class Stub:
    """A psycopg cursor that answers at once: rowcount 1 and the prepared rows."""

    rowcount = 1

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> None:
        pass

    def fetchone(self) -> tuple[Any, ...]:
        return self.rows[0]

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows


class AsyncStub:
    """``Stub`` as psycopg's async cursor: the same answers, awaited."""

    rowcount = 1

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows

    async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> None:
        pass

    async def fetchone(self) -> tuple[Any, ...]:
        return self.rows[0]

    async def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows
