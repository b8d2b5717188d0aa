"""What a handler in another process did, as rows of a shared SQLite file: ``began`` when a
run starts, ``effects`` when it did its work. A test kills or races those processes and
counts the rows; ``child`` starts one with this checkout on its path."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("began", "effects")


def create(path: Path) -> Path:
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=WAL")  # writers in several processes, readers beside
        for table in TABLES:
            db.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, key TEXT NOT NULL)")
    return path


def record(path: str | Path, table: str, key: str) -> int:
    """One row; its id (a run's number)."""
    assert table in TABLES
    with sqlite3.connect(path, timeout=30) as db:
        cursor = db.execute(f"INSERT INTO {table} (key) VALUES (?)", (key,))
        return int(cursor.lastrowid or 0)


def rows(path: Path, table: str) -> list[str]:
    assert table in TABLES
    with sqlite3.connect(path) as db:
        return [r[0] for r in db.execute(f"SELECT key FROM {table} ORDER BY id")]


def child(module: str, *args: str) -> subprocess.Popen[bytes]:
    """``python -m module args`` with this checkout's src and tests importable."""
    paths = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, env=env)
