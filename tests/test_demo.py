from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from mideng.cli import main
from mideng.cli.demo import run_demo


def test_demo_shows_three_coupons_without_and_one_with(tmp_path: Path) -> None:
    rows = run_demo(tmp_path, None)
    coupons, points, runs, receipts = rows["without mideng"]
    assert (coupons, points, receipts) == (3, 297, 3)
    assert runs == 4  # three concurrent callbacks and the late retry all entered the handler
    assert rows["with mideng"] == (1, 99, 1, 1)


def test_demo_command_prints_the_table() -> None:
    result = CliRunner().invoke(main, ["demo"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "without mideng │ 3 │ 297 │ 4 │ 3" in text
    assert "with mideng │ 1 │ 99 │ 1 │ 1" in text
    assert "3 coupons for one payment" in text
