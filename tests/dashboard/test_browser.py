"""The dashboard in a real browser (headless chromium through Selenium): every page loads
with nothing in the console (no CSP violation, no failed load), the filters and the lookup
work by their forms, and a stored ``<script>`` shows as text and runs nothing. Screenshots of
each page are saved (``MIDENG_SCREENSHOTS``, default the test's tmp dir)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.browser import browser, console_errors, screenshots
from tests.dashboard.data import XSS, Seeded

FAMILIES = ("sqlite", "postgresql")
RECORDS = 75


@pytest.fixture
def driver() -> Iterator[Any]:
    with browser() as opened:
        yield opened


def _press(driver: Any, button: Any) -> None:
    """Click ``button`` and wait for the next page to replace this one."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    before = driver.find_element(By.TAG_NAME, "h1")
    button.click()
    WebDriverWait(driver, 20).until(lambda _: _gone(before))


def _gone(element: Any) -> bool:
    """Whether ``element`` left the document (the next page replaced its page). Chromium
    says so as a stale reference, or, caught while the page is being replaced, as an
    inspector error naming a node that "does not belong to the document"."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in str(exc):
            return True
        raise
    return False


def _shot(driver: Any, tmp_path: Path, filled: Seeded, name: str) -> None:
    path = screenshots(tmp_path) / f"{filled.family}-{name}.png"
    assert driver.save_screenshot(str(path))
    assert path.stat().st_size > 1000


def test_every_page_loads_clean(site: str, driver: Any, filled: Seeded, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    pay = filled.scope("pay")
    pages = {
        "overview": "/",
        "records": "/records",
        "unknown": "/records?status=unknown",
        "record": f"/record?scope={pay}&key=order-0004",
        "outbox": "/outbox",
        "outbox-dead": "/outbox?state=dead",
        "outbox-row": f"/outbox/row?id={filled.dead_ids[0]}",
        "operations": "/operations",
        "operation": f"/operation?scope={pay}&key=order-0004",
        "request": f"/lookup?kind=request&q=req-{filled.prefix}-4",
        "audit": "/audit",
    }
    for name, path in pages.items():
        driver.get(site + path)
        assert driver.find_element(By.TAG_NAME, "h1").text, name
        background = driver.find_element(By.TAG_NAME, "header").value_of_css_property(
            "background-color"
        )
        assert background == "rgba(29, 35, 48, 1)", (name, background)  # the CSS loaded
        assert console_errors(driver) == [], name
        _shot(driver, tmp_path, filled, name)


def test_filters_paging_and_lookup_by_their_forms(
    site: str, driver: Any, filled: Seeded, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    driver.get(site + "/records")
    driver.find_element(By.NAME, "scope").send_keys(filled.scope("pay"))
    Select(driver.find_element(By.NAME, "status")).select_by_value("succeeded")
    _press(driver, driver.find_element(By.CSS_SELECTOR, "form.filters button"))
    first = [a.text for a in driver.find_elements(By.CSS_SELECTOR, "#records tbody td a")]
    assert first[0] == "order-0000"
    assert len(first) == 50
    _press(driver, driver.find_element(By.ID, "next"))
    second = [a.text for a in driver.find_elements(By.CSS_SELECTOR, "#records tbody td a")]
    assert second == [f"order-{n:04d}" for n in range(50, 75)]
    assert driver.find_elements(By.ID, "next") == []

    Select(driver.find_element(By.NAME, "kind")).select_by_value("key")
    driver.find_element(By.NAME, "q").send_keys(f"{filled.scope('charge')}:c2")
    _press(driver, driver.find_element(By.CSS_SELECTOR, "form.lookup button"))
    assert "unknown" in driver.find_element(By.CSS_SELECTOR, "dl.fields").text
    _shot(driver, tmp_path, filled, "lookup-key")

    Select(driver.find_element(By.NAME, "kind")).select_by_value("message")
    driver.find_element(By.NAME, "q").send_keys(filled.dead_ids[1])
    _press(driver, driver.find_element(By.CSS_SELECTOR, "form.lookup button"))
    assert filled.dead_ids[1] in driver.find_element(By.TAG_NAME, "h1").text
    assert console_errors(driver) == []


def test_a_stored_script_is_shown_as_text_and_runs_nothing(
    site: str, driver: Any, filled: Seeded, tmp_path: Path
) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    for path in (f"/record?scope={filled.scope('xss')}&key=x1", "/outbox?state=dead"):
        driver.get(site + path)
        with pytest.raises(NoAlertPresentException):
            driver.switch_to.alert.text  # noqa: B018 - reading it is the check
        assert driver.execute_script("return document.scripts.length") == 0
        assert console_errors(driver) == []
    driver.get(site + f"/record?scope={filled.scope('xss')}&key=x1")
    assert XSS in driver.find_element(By.ID, "result").text
    _shot(driver, tmp_path, filled, "xss")


def _submit(driver: Any, form_id: str, confirm: str | None, dry_run: bool = False) -> str:
    """Fill the form's confirmation (when given) and press its button; the answer's h1."""
    from selenium.webdriver.common.by import By

    form = driver.find_element(By.ID, form_id)
    if confirm is not None:
        form.find_element(By.NAME, "confirm").send_keys(confirm)
    _press(driver, form.find_element(By.CSS_SELECTOR, "button.dry" if dry_run else "button.act"))
    return str(driver.find_element(By.TAG_NAME, "h1").text)


def test_each_action_with_and_without_its_confirmation(
    acting: str, driver: Any, filled: Seeded, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    charge = filled.scope("charge")
    record_page = f"{acting}/record?scope={charge}&key=c1"
    driver.get(record_page)
    _shot(driver, tmp_path, filled, "record-actions")
    assert _submit(driver, "resolve", None) == "400"  # no confirmation: nothing done
    driver.get(record_page)
    assert _submit(driver, "resolve", None, dry_run=True) == "Dry run: resolve"
    assert filled.guard.get(charge, "c1").status.value == "unknown"  # type: ignore[union-attr]
    driver.get(record_page)
    assert _submit(driver, "resolve", "c1") == "resolve"
    assert driver.find_element(By.ID, "done")
    _shot(driver, tmp_path, filled, "resolved")
    assert filled.guard.get(charge, "c1").status.value == "succeeded"  # type: ignore[union-attr]

    driver.get(f"{acting}/record?scope={charge}&key=c2")
    assert _submit(driver, "release", "wrong") == "400"
    assert filled.guard.get(charge, "c2") is not None
    driver.get(f"{acting}/record?scope={charge}&key=c2")
    assert _submit(driver, "release", "c2") == "release"
    assert filled.guard.get(charge, "c2") is None

    row = filled.dead_ids[0]
    driver.get(f"{acting}/outbox/row?id={row}")
    assert _submit(driver, "requeue", None) == "400"
    driver.get(f"{acting}/outbox/row?id={row}")
    assert _submit(driver, "requeue", row) == "requeue"
    driver.get(f"{acting}/outbox?state=dead")
    _shot(driver, tmp_path, filled, "outbox-bulk")
    assert _submit(driver, "requeue-all", None, dry_run=True) == "Dry run: requeue"
    driver.get(f"{acting}/outbox?state=dead")
    assert _submit(driver, "requeue-all", "requeue 2") == "requeue"
    assert driver.find_element(By.ID, "done")
    driver.get(f"{acting}/outbox?state=dead")
    assert "no rows" in driver.find_element(By.ID, "rows").text
    # The only console lines: the refused actions' own 400 replies (no CSP or script error).
    unexpected = [e for e in console_errors(driver) if "/actions/" not in e or "400" not in e]
    assert unexpected == []


def test_a_change_made_meanwhile_answers_409_in_the_browser(
    acting: str, driver: Any, filled: Seeded, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    charge = filled.scope("charge")
    driver.get(f"{acting}/record?scope={charge}&key=c1")
    filled.guard.resolve(charge, "c1", failed=True)  # another operator, after the look
    assert _submit(driver, "resolve", "c1") == "resolve"
    assert "Changed since you looked" in driver.find_element(By.ID, "changed").text
    _shot(driver, tmp_path, filled, "changed-409")
    record = filled.guard.get(charge, "c1")
    assert record is not None
    assert record.status.value == "failed"  # as the other operator left it


def test_bulk_resolve_and_release_as_seen_then_the_audit(
    acting: str, driver: Any, filled: Seeded, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    charge, job = filled.scope("charge"), filled.scope("job")
    unknown = f"{acting}/records?scope={charge}&status=unknown"
    driver.get(unknown)
    _shot(driver, tmp_path, filled, "records-bulk")
    assert _submit(driver, "resolve-all", None) == "400"  # no confirmation: nothing done
    driver.get(unknown)
    assert _submit(driver, "resolve-all", None, dry_run=True) == "Dry run: resolve"
    assert len(driver.find_elements(By.CSS_SELECTOR, "#outcomes tbody tr")) == 2
    driver.get(unknown)
    filled.guard.resolve(charge, "c2", result={"by": "someone else"})  # after the look
    assert _submit(driver, "resolve-all", "resolve 2") == "resolve"
    assert "Changed since you looked" in driver.find_element(By.ID, "changed").text
    _shot(driver, tmp_path, filled, "bulk-409")
    assert filled.guard.get(charge, "c1").status.value == "failed"  # type: ignore[union-attr]
    assert filled.guard.get(charge, "c2").status.value == "succeeded"  # type: ignore[union-attr]

    expired = f"{acting}/records?scope={job}&status=processing"
    driver.get(expired)
    assert _submit(driver, "release-expired", "release 2") == "400"
    driver.get(expired)
    assert _submit(driver, "release-expired", "release 1") == "release"
    assert driver.find_element(By.ID, "done")
    assert filled.guard.get(job, "stuck-1") is None

    driver.get(f"{acting}/audit")
    rows = driver.find_elements(By.CSS_SELECTOR, "#audit tbody tr")
    assert [r.find_elements(By.TAG_NAME, "td")[3].text for r in rows] == [
        f"{job}:stuck-1",
        f"{charge}:c1",
    ]
    _shot(driver, tmp_path, filled, "audit")
    unexpected = [
        e
        for e in console_errors(driver)
        if "/actions/" not in e or ("400" not in e and "409" not in e)
    ]
    assert unexpected == []
