"""Instructions per call, counted under valgrind's callgrind: a figure that does not move with
the machine's load (the benchmarks that count Python rather than time it share this runner)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def instructions_per_call(script: str, case: str, calls: int, base: int) -> float:
    """Run ``script --child CASE N`` under callgrind for ``base`` and ``base + calls`` calls;
    the difference per call, so start-up and warm-up cancel out."""
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
                    script,
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
