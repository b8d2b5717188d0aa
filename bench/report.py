"""How the cases are called and what they print: each case's argument parser, the command a
result was made with, the markdown tables, and the result files under bench/results/."""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from bench.contenders import ACase, Case

RESULTS = Path(__file__).resolve().parent / "results"


def parser(name: str, doc: str | None) -> argparse.ArgumentParser:
    """The parser of case ``name``, described by the first line of its module's ``doc``."""
    return argparse.ArgumentParser(
        prog=f"python -m bench {name}", description=doc.splitlines()[0] if doc else None
    )


def command(name: str, argv: list[str]) -> str:
    """The command line that runs case ``name`` with ``argv``, as a result file shows it."""
    return " ".join([".venv/bin/python -m bench", name, *argv])


def write(path: str | Path, text: str) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text + "\n", encoding="utf-8")


def table(rows: list[tuple[str, float, float | None]], floor_label: str = "floor") -> str:
    lines = [f"| case | µs/call | x {floor_label} |", "|---|---:|---:|"]
    for name, us, ratio in rows:
        lines.append(f"| {name} | {us:.1f} | {'-' if ratio is None else f'{ratio:.2f}'} |")
    return "\n".join(lines)


def case_table(
    title: str, cases: list[Case] | list[ACase], floor: Case | ACase | None
) -> list[str]:
    """A markdown table of the cases' medians and their ratios to ``floor``."""
    floor_first = statistics.median(floor.firsts) if floor else None
    floor_dup = statistics.median(floor.duplicates) if floor else None

    def ratio(value: float, base: float | None) -> str:
        return "-" if base is None else f"{value / base:.2f}"

    lines = [
        f"### {title}",
        "",
        "| contender | first call µs | x floor | duplicate µs | x floor |",
        "|---|---:|---:|---:|---:|",
    ]
    for case in cases:
        first, dup = statistics.median(case.firsts), statistics.median(case.duplicates)
        lines.append(
            f"| {case.name} | {first:.1f} | {ratio(first, floor_first)} | "
            f"{dup:.1f} | {ratio(dup, floor_dup)} |"
        )
    return [*lines, ""]
