"""Instructions per call, counted under valgrind's callgrind: a figure that does not move with
the machine's load. Every counted case runs its calls through this one counter:

    from bench.callgrind import instructions_per_call
    instructions_per_call("bench.cases.python", "mideng first", 500, 1000)

``target`` is a module run with ``python -m`` (from the repository's root) or a script's path;
either must run ``CALLS`` calls of ``CASE`` when given ``--child CASE CALLS`` (a counted case
ends with ``child(*child_call(sys.argv[1:]))``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def instructions_per_call(target: str, case: str, calls: int, base: int) -> float:
    """Run ``target --child CASE N`` under callgrind for ``base`` and ``base + calls`` calls;
    the difference per call, so start-up and warm-up cancel out."""
    program = [target] if target.endswith(".py") else ["-m", target]
    totals = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (base, base + calls):
            out = Path(tmp) / f"cg.{n}"
            done = subprocess.run(
                [
                    "valgrind",
                    "--tool=callgrind",
                    f"--callgrind-out-file={out}",
                    sys.executable,
                    *program,
                    "--child",
                    case,
                    str(n),
                ],
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONHASHSEED": "0"},
                check=False,
            )
            found = re.search(r"Collected : (\d+)", done.stderr)
            if done.returncode != 0 or found is None:
                raise SystemExit(f"{case}: valgrind failed\n{done.stderr[-2000:]}")
            totals.append(int(found.group(1)))
    return (totals[1] - totals[0]) / calls


def child_call(argv: list[str]) -> tuple[str, int]:
    """The CASE and CALLS of the ``--child CASE CALLS`` a counted target is run with."""
    if len(argv) != 3 or argv[0] != "--child":
        raise SystemExit("counted under callgrind with --child CASE CALLS; run: python -m bench")
    return argv[1], int(argv[2])


def need_valgrind(name: str) -> None:
    """Stop case ``name`` when valgrind is not installed."""
    if shutil.which("valgrind") is None:
        raise SystemExit(f"{name} counts instructions with valgrind: apt install valgrind")
