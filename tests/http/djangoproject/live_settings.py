"""The test project served by a real server in other processes: the store is the file the
test names (every worker shares it), and each run of a decorated view is a line in a file."""

from __future__ import annotations

import os

from tests.http.djangoproject.settings import *  # noqa: F403
from tests.http.djangoproject.settings import MIDENG_HTTP as _IN_PROCESS

ALLOWED_HOSTS = ["127.0.0.1"]
MIDENG_HTTP = {
    **{name: value for name, value in _IN_PROCESS.items() if name != "guard"},
    "store": os.environ["MIDENG_LIVE_STORE"],
}
RUNS_DIR = os.environ["MIDENG_LIVE_RUNS"]
VIEW_DELAY = 0.3  # long enough for the duplicates to arrive while the first still runs
