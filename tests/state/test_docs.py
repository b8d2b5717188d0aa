"""docs/state.md's examples run as they are: every ``python`` block, in order, in one fresh
process (they assert their own answers), in an empty directory for its SQLite file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "state.md"


def test_the_examples_run(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert len(blocks) >= 8
    script = tmp_path / "examples.py"
    script.write_text("\n".join(blocks))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # The duplicate's WARNING line, with the business key, as the page shows it.
    assert "mideng duplicate insert table=payments channel='alipay'" in done.stderr
