"""Django's admin over mideng's tables, driven by Django's test client in child processes on
SQLite and PostgreSQL: each page lists, filters and searches; each action asks first (a dry
run for a requeue), then acts on what the list showed, and a row changed between the page and
the POST is told "changed meanwhile", nothing done; a staff user without the action's
permission neither sees it nor can post it; texts from the tables are shown escaped."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.contrib.django.admin_project import AdminShop
from tests.contrib.django.outbox_rows import added, killed, states
from tests.contrib.django.project import fresh_database

PENDING, SENT, DEAD = 0, 1, 2
SCRIPT = "<script>alert(1)</script>"


@pytest.fixture(params=["sqlite", "postgresql"])
def shop(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AdminShop]:
    with fresh_database(request.param, tmp_path) as url:
        yield AdminShop(tmp_path, url)


def _outbox(shop: AdminShop) -> list[str]:
    """Rows: two dead (``orders``), one sent, one pending written two minutes ago whose key
    is markup (``refunds``)."""
    ids = added(shop.url, shop.outbox, "orders", ["order:1", "order:2", "order:3"])
    killed(shop.url, shop.outbox, set(ids[:2]))
    ids += added(shop.url, shop.outbox, "refunds", [SCRIPT])
    engine = sa.create_engine(shop.url)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql(
                f"UPDATE {shop.outbox} SET created_at = {time.time() - 120} WHERE id = '{ids[3]}'"
            )
    finally:
        engine.dispose()
    assert [states(shop.url, shop.outbox)[i][0] for i in ids] == [DEAD, DEAD, SENT, PENDING]
    return ids


def test_check_is_clean_and_the_permissions_exist(shop: AdminShop) -> None:
    check = shop.project.manage("check")
    assert check.returncode == 0, check.stderr
    assert "System check identified no issues (0 silenced)." in check.stdout
    changes = shop.project.manage("makemigrations", "mideng", "--check", "--dry-run")
    assert changes.returncode == 0, changes.stdout + changes.stderr
    found = shop.run(
        "from django.contrib.auth.models import Permission\n"
        "out = sorted(Permission.objects.filter(content_type__app_label='mideng')"
        ".values_list('codename', flat=True))"
    )
    for codename in ("requeue_outbox", "resolve_record", "release_record", "reconcile_operation"):
        assert codename in found


def test_outbox_lists_filters_searches_and_escapes(shop: AdminShop) -> None:
    ids = _outbox(shop)
    out = shop.run(
        "c = staff('viewer', 'mideng.view_outboxmessage')\n"
        "pages = {q: text(c.get(OUTBOX + q)) for q in ('', '?state=2', '?state=1',"
        " '?pending_older_than=60', '?pending_older_than=3600', '?q=order:2',"
        " '?destination=refunds')}\n"
        "out = {q: listed(p, OUTBOX) for q, p in pages.items()}\n"
        "out['escaped'] = '&lt;script&gt;alert(1)&lt;/script&gt;' in pages['']\n"
        f"out['raw'] = {SCRIPT!r} in pages['']\n"
        "out['action'] = 'requeue' in pages['']\n"
        "out['add'] = c.get(OUTBOX + 'add/').status_code\n"
    )
    assert out[""] == [ids[3], *ids[:3]]  # oldest first: the pending row is two minutes old
    assert out["?state=2"] == ids[:2]
    assert out["?state=1"] == [ids[2]]
    assert out["?pending_older_than=60"] == [ids[3]]
    assert out["?pending_older_than=3600"] == []
    assert out["?q=order:2"] == [ids[1]]
    assert out["?destination=refunds"] == [ids[3]]
    assert (out["escaped"], out["raw"]) == (True, False)
    assert out["action"] is False  # no requeue permission: no action to choose
    assert out["add"] == 403


REQUEUE_PAGE = """
c = staff('operator', 'mideng.view_outboxmessage', 'mideng.requeue_outbox')
page = text(c.get(OUTBOX))
seen = carried(page)
picked = {picked!r}
asked = c.post(OUTBOX, form([('action', 'requeue'), ('index', '0')]
    + [('_selected_action', i) for i in picked]
    + [('seen-' + i, seen[i]) for i in picked if i in seen]))
confirm = text(asked)
out = {{'seen': seen, 'confirm': confirm}}
"""

CONFIRM = """
done = c.post(OUTBOX, form(hidden(confirm)), follow=True)
out['said'] = said(done)
"""


def test_requeue_asks_with_a_dry_run_then_requeues(shop: AdminShop) -> None:
    ids = _outbox(shop)
    picked = ids[:2]
    out = shop.run(
        "from tests.contrib.django.outbox_rows import states\n"
        + REQUEUE_PAGE.format(picked=picked)
        + f"out['between'] = states({shop.url!r}, {shop.outbox!r})\n"
        + CONFIRM
    )
    assert out["seen"] == {ids[0]: "1", ids[1]: "1", ids[2]: "-1", ids[3]: "-1"}
    assert f"Would requeue {ids[0]}" in out["confirm"]
    assert f"Would requeue {ids[1]}" in out["confirm"]
    assert [out["between"][i][0] for i in picked] == [DEAD, DEAD]  # the page changed nothing
    assert out["said"] == [f"Requeued {ids[0]}", f"Requeued {ids[1]}"]
    assert [states(shop.url, shop.outbox)[i] for i in picked] == [(PENDING, 0), (PENDING, 0)]


def test_a_row_changed_between_the_page_and_the_post_is_left_alone(shop: AdminShop) -> None:
    ids = _outbox(shop)
    # Between the confirmation page and its POST another operator requeues ids[0] and a
    # relay sends it: the POST finds it sent, says so, and leaves it sent.
    out = shop.run(
        "from mideng.outbox.dead import SeenRow, requeue\n"
        "from mideng.stores.sql.engines import engine_for\n"
        "from tests.contrib.django.outbox_rows import killed\n"
        + REQUEUE_PAGE.format(picked=ids[:2])
        + f"other = engine_for({shop.url!r})\n"
        + f"requeue(other, [SeenRow({ids[0]!r}, 1)], table={shop.outbox!r})\n"
        + "other.dispose()\n"
        + f"killed({shop.url!r}, {shop.outbox!r}, set())\n"
        + CONFIRM
    )
    assert out["said"] == [
        f"Changed meanwhile, nothing done: {ids[0]} is now sent, attempts 0",
        f"Requeued {ids[1]}",
    ]
    now = states(shop.url, shop.outbox)
    assert (now[ids[0]][0], now[ids[1]]) == (SENT, (PENDING, 0))


def test_a_row_not_dead_when_listed_is_not_requeued(shop: AdminShop) -> None:
    ids = _outbox(shop)
    out = shop.run(REQUEUE_PAGE.format(picked=[ids[2], "no-such-row"]) + CONFIRM)
    assert out["said"] == [
        f"Changed meanwhile, nothing done: {ids[2]} is now sent, attempts 0",
        "Gone, nothing done: no-such-row",
    ]


def test_a_staff_user_without_the_permission_is_refused(shop: AdminShop) -> None:
    ids = _outbox(shop)
    out = shop.run(
        "c = staff('viewer', 'mideng.view_outboxmessage')\n"
        f"picked = {ids[:2]!r}\n"
        "forged = c.post(OUTBOX, form([('action', 'requeue'), ('index', '0'), ('post', 'yes')]"
        " + [('_selected_action', i) for i in picked] + [('seen-' + i, '1') for i in picked]),"
        ")\n"
        "out = {'status': forged.status_code}\n"
    )
    assert out["status"] == 403
    assert [states(shop.url, shop.outbox)[i][0] for i in ids[:2]] == [DEAD, DEAD]
