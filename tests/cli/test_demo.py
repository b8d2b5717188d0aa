from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from mideng.cli import main
from mideng.cli.demo import run_demo

README = Path(__file__).resolve().parents[2] / "README.md"
# A row of the demo's table: coupons issued, points added, handler runs, distinct receipts.
ROW = re.compile(r"\b(without|with) mideng │ (\d+) │ (\d+) │ (\d+) │ (\d+) │")
# What README.md says the demo prints, figure by figure.
SAID = re.compile(
    r"prints coupons issued, points added and handler runs: (\d+) coupons?, (\d+) points and "
    r"(\d+) handler runs? without mideng .*?against (\d+) coupons?, (\d+) points and (\d+) "
    r"handler runs? with it"
)


@pytest.fixture(scope="module")
def printed() -> str:
    result = CliRunner().invoke(main, ["demo"])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_demo_shows_three_coupons_without_and_one_with(tmp_path: Path) -> None:
    rows = run_demo(tmp_path, None)
    coupons, points, runs, receipts = rows["without mideng"]
    assert (coupons, points, receipts) == (3, 297, 3)
    assert runs == 4  # three concurrent callbacks and the late retry all entered the handler
    assert rows["with mideng"] == (1, 99, 1, 1)


def test_demo_command_prints_the_table(printed: str) -> None:
    assert "without mideng │ 3 │ 297 │ 4 │ 3" in printed
    assert "with mideng │ 1 │ 99 │ 1 │ 1" in printed
    assert "3 coupons for one payment" in printed


def test_readme_quotes_what_the_demo_prints(printed: str) -> None:
    said = SAID.search(" ".join(README.read_text(encoding="utf-8").split()))
    assert said is not None, "README.md no longer states the demo's coupons, points and runs"
    rows = {label: tuple(int(n) for n in figures[:3]) for label, *figures in ROW.findall(printed)}
    assert set(rows) == {"without", "with"}, printed
    assert tuple(int(n) for n in said.groups()) == (*rows["without"], *rows["with"])
