"""Every mideng log line carries request id, scope, key and outcome as record fields, and
every one is written by the mideng.observability.logs package."""

from __future__ import annotations

import ast
import asyncio
import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from mideng import Guard, open_store
from mideng.context import request_id_scope
from mideng.errors import StoreUnavailableError
from mideng.observability import logs, metrics
from mideng.observability.logs import FIELDS, MidengFields

SRC = Path(__file__).resolve().parents[2] / "src" / "mideng"
LOGS = SRC / "observability" / "logs"
#: The names a module calls its logger by; the logs package's own included.
LOGGERS = {"log", "logger", "logging", "http_log", "messaging_log", "outbox_log"}


class JsonLines(logging.Formatter):
    """What a JSON formatter does with a record: its message and its extra attributes."""

    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(
            {"level": record.levelname, "message": record.getMessage()}
            | {name: getattr(record, name) for name in FIELDS}
        )


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonLines())
    handler.addFilter(MidengFields())
    logger = logging.getLogger("mideng")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.DEBUG)
    yield out
    logger.removeHandler(handler)
    logger.setLevel(old)


def test_a_duplicate_is_a_json_line_with_its_fields(lines: io.StringIO) -> None:
    guard = Guard(open_store("memory://"))
    with request_id_scope("req-first"):
        guard.run("orders", "o-7", lambda: 1)
    with request_id_scope("req-retry"):
        guard.run("orders", "o-7", lambda: 1)
    [line] = [json.loads(x) for x in lines.getvalue().splitlines()]
    assert line["level"] == "WARNING"
    assert "first_request_id=req-first" in line["message"]
    assert {k: line[k] for k in FIELDS} == {
        "mideng_request_id": "req-retry",
        "mideng_scope": "orders",
        "mideng_key": "o-7",
        "mideng_outcome": "replay",
    }


def test_the_filter_gives_other_records_the_fields_too() -> None:
    record = logging.LogRecord("app", logging.INFO, __file__, 1, "paid", None, None)
    with request_id_scope("req-9"):
        assert MidengFields().filter(record)
    assert {name: getattr(record, name) for name in FIELDS} == {
        "mideng_request_id": "req-9",
        "mideng_scope": None,
        "mideng_key": None,
        "mideng_outcome": None,
    }
    logging.Formatter("%(mideng_request_id)s %(mideng_scope)s %(message)s").format(record)


def test_a_stuck_record_is_an_error_with_its_fields(lines: io.StringIO) -> None:
    logs.stuck_record("payments", "p-1", 3, 900.0, "req-0")
    [line] = [json.loads(x) for x in lines.getvalue().splitlines()]
    assert line["level"] == "ERROR"
    assert line["mideng_outcome"] == "stuck"
    assert line["mideng_key"] == "p-1"
    assert line["mideng_request_id"] == "req-0"


def test_structlog_sees_the_fields() -> None:
    structlog = pytest.importorskip("structlog")
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processor=structlog.processors.JSONRenderer(),
            foreign_pre_chain=[structlog.stdlib.ExtraAdder(FIELDS)],
        )
    )
    logger = logging.getLogger("mideng")
    logger.addHandler(handler)
    try:
        logs.stuck_record("payments", "p-2", 1, 60.0, None)
    finally:
        logger.removeHandler(handler)
    event = json.loads(out.getvalue())
    assert event["mideng_scope"] == "payments"
    assert event["mideng_outcome"] == "stuck"


def _logging_calls(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name == "getLogger" or (
                name in {"debug", "info", "warning", "error", "exception", "critical", "log"}
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in LOGGERS
            ):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    return found


def test_every_log_line_is_written_by_the_logs_package() -> None:
    stray = [
        hit
        for path in sorted(SRC.rglob("*.py"))
        if LOGS not in path.parents
        for hit in _logging_calls(path)
    ]
    assert stray == []
    for area in ("calls", "messaging", "outbox"):  # the walker does see them, in each module
        assert _logging_calls(LOGS / f"{area}.py"), area


def test_observability_is_a_leaf() -> None:
    """It imports nothing from mideng but errors, context, moved (its old paths' answer, itself a
    leaf) and itself."""
    for path in (SRC / "observability").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("mideng")
            ):
                assert node.module in {
                    "mideng.errors",
                    "mideng.context",
                    "mideng.moved",
                } or node.module.startswith("mideng.observability"), (
                    f"{path.name} imports {node.module}"
                )
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("mideng") for a in node.names), path.name


class Refusing(logging.Handler):
    """An application's handler that raises on the first record it is given (a remote sink
    whose connection was reset): logging contains only what a handler hands to handleError,
    and a handler's own ``emit`` raises through ``log.warning``."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if not self.refused:
            self.refused.append(record.getMessage())
            raise ConnectionResetError("log sink reset (injected)")


class RefusingFilter(logging.Filter):
    """A filter that raises once: logging calls filters outside its own error handling."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.refused:
            self.refused.append(record.getMessage())
            raise KeyError("no such field (injected)")
        return True


@pytest.fixture(params=["handler", "filter"])
def refusing(request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """The "mideng" logger with a handler, or a filter, whose first record raises; the
    messages it refused."""
    logger = logging.getLogger("mideng")
    old = logger.level
    logger.setLevel(logging.DEBUG)
    if request.param == "handler":
        handler = Refusing()
        logger.addHandler(handler)
        yield handler.refused
        logger.removeHandler(handler)
    else:
        hook = RefusingFilter()
        logger.addFilter(hook)
        yield hook.refused
        logger.removeFilter(hook)
    logger.setLevel(old)


def _store(kind: str, tmp_path: Path) -> Any:
    return open_store("memory://" if kind == "memory" else f"sqlite:///{tmp_path / 'm.db'}")


@pytest.mark.parametrize("metered", [False, True], ids=["plain", "metrics"])
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_duplicate_line_that_raises_still_replays(
    kind: str, metered: bool, tmp_path: Path, refusing: list[str]
) -> None:
    if metered:
        metrics.enable(CollectorRegistry())
    guard = Guard(_store(kind, tmp_path))
    runs: list[int] = []

    def charge() -> str:
        runs.append(1)
        return "charged"

    assert guard.run("pay", "p-1", charge) == "charged"
    assert guard.run("pay", "p-1", charge) == "charged"  # its duplicate line raised
    assert [m.split(" scope=")[0] for m in refusing] == ["mideng duplicate"]

    async def acharge() -> str:
        runs.append(1)
        return "charged"

    refusing.clear()
    assert asyncio.run(guard.arun("pay", "p-2", acharge)) == "charged"
    assert asyncio.run(guard.arun("pay", "p-2", acharge)) == "charged"
    assert len(refusing) == 1
    assert runs == [1, 1]
    guard.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_fail_open_line_that_raises_after_the_body_still_answers(
    kind: str, tmp_path: Path, refusing: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _store(kind, tmp_path)

    def down(*args: object) -> None:
        raise StoreUnavailableError("store lost after the body (injected)")

    monkeypatch.setattr(store, "complete", down)
    monkeypatch.setattr(store, "acomplete", down)
    guard = Guard(store, fail_open=True)
    assert guard.run("notify", "n-1", lambda: "sent") == "sent"
    assert "runs unguarded (fail_open)" in refusing[0]

    async def send() -> str:
        return "sent"

    refusing.clear()
    assert asyncio.run(guard.arun("notify", "n-2", send)) == "sent"
    assert len(refusing) == 1
    guard.close()
