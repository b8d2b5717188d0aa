"""A real browser on a served dashboard: uvicorn in a thread on a free loopback port, and
Debian's chromium driven by Selenium through /usr/bin/chromedriver (no driver downloaded:
``SE_OFFLINE``). Screenshots go to ``$MIDENG_SCREENSHOTS`` (default: the test's tmp dir)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM = "/usr/bin/chromium"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def served(app: Any) -> Iterator[str]:
    """``app`` on http://127.0.0.1:<port> while the block runs."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the dashboard's server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)


def need_browser() -> None:
    if shutil.which(CHROMIUM) is None or not Path(CHROMEDRIVER).exists():
        if os.environ.get("MIDENG_REQUIRE_SERVICES") == "1":
            pytest.fail("chromium and chromium-driver are needed (apt-get install)")
        pytest.skip("chromium or chromedriver is not installed")
    pytest.importorskip("selenium")


@contextmanager
def browser() -> Iterator[Any]:
    need_browser()
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not fetch a driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        "--disable-gpu",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def screenshots(tmp_path: Path) -> Path:
    where = Path(os.environ.get("MIDENG_SCREENSHOTS") or tmp_path / "screenshots")
    where.mkdir(parents=True, exist_ok=True)
    return where


def console_errors(driver: Any) -> list[str]:
    """The browser console's errors and warnings since the last call (a CSP violation, a
    script error, a failed load are all reported there)."""
    return [
        entry["message"]
        for entry in driver.get_log("browser")
        if entry["level"] in ("SEVERE", "WARNING")
    ]
