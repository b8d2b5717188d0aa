"""A process that claims one key and then sits in its body until told to go on.

Used by the crash tests: the parent SIGKILLs or SIGSTOPs it mid-body. Exit codes: 0 the body
finished and completed, 3 its late completion was fenced (LeaseLostError).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from mideng import Guard, open_store
from mideng.errors import LeaseLostError


def main() -> int:
    url, options, scope, key, lease, on_expiry, workdir = sys.argv[1:8]
    work = Path(workdir)
    store = open_store(url, **json.loads(options))
    guard = Guard(store, lease=float(lease), on_expiry=on_expiry)

    def body() -> dict[str, object]:
        (work / "started").write_text(str(os.getpid()))
        end = time.monotonic() + 120
        while not (work / "go").exists():
            if time.monotonic() > end:
                raise TimeoutError("never told to go on")
            time.sleep(0.02)
        return {"by": "holder", "pid": os.getpid()}

    try:
        guard.run(scope, key, body)
    except LeaseLostError:
        return 3
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
