"""docs/messaging.md's Celery example with ``engine=`` runs as it is, but for names: its
block, with unique table, scope and queue names, as ``tasks.py`` in an empty directory; a
worker started from it the way the page says, then ``python tasks.py`` sending the task three
times. One deduction (10 -> 8), the one result for all three sends."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from tests.brokers import BrokerNames, token
from tests.helpers.storm import ROOT
from tests.services import POSTGRES_URL, need

pytestmark = pytest.mark.slow

DOC = ROOT / "docs" / "messaging.md"


def example() -> str:
    section = DOC.read_text().split("### In the database's transaction: `engine=`", 1)[1]
    found = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert found is not None
    return found.group(1)


def test_the_engine_example_runs(broker_names: BrokerNames, tmp_path: Path) -> None:
    need("postgresql")
    need("redis")
    suffix = token()
    tables = {name: f"{name}_{suffix}" for name in ("stock_moves", "stock", "mideng_records")}
    queue = broker_names.rabbitmq_queue("celery-docs")
    exchange = broker_names.rabbitmq_exchange("celery-docs")
    source = example()
    assert 'DB = "postgresql+psycopg://postgres@localhost:5432/test"' in source
    source = source.replace("postgresql+psycopg://postgres@localhost:5432/test", POSTGRES_URL)
    assert '"stock-deduction"' in source
    source = source.replace('"stock-deduction"', f'"docs-{suffix}"')
    for name, unique in tables.items():  # stock_moves before stock: \b sees no "_" boundary
        source = re.sub(rf"\b{name}\b", unique, source)
    source = source.replace(
        "\n_guards",
        f"\napp.conf.update(task_default_queue={queue!r}, task_default_exchange={exchange!r})"
        "\n_guards",
        1,
    )
    (tmp_path / "tasks.py").write_text(source)
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT / 'src'}", "PATH": "/usr/bin:/bin"}
    log = tmp_path / "worker.log"
    with log.open("wb") as sink:
        worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tasks", "worker", "-c", "1", "-l", "INFO"],
            cwd=tmp_path,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        sent = subprocess.run(
            [sys.executable, "tasks.py"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        engine = create_engine(POSTGRES_URL, poolclass=NullPool)
        with engine.begin() as conn:
            for unique in tables.values():
                conn.execute(text(f"DROP TABLE IF EXISTS {unique}"))
        engine.dispose()
    output = sent.stdout + sent.stderr + log.read_text(errors="replace")
    assert sent.returncode == 0, output
    result = "{'order': '1001', 'sku': 'SKU-1', 'left': 8}"
    assert sent.stdout.splitlines() == [f"[{result}, {result}, {result}]", "1"], output
