"""Django's admin over mideng's tables, driven by Django's test client in child processes on
SQLite and PostgreSQL: each page lists, filters and searches; each action asks first (a dry
run for a requeue), then acts on what the list showed, and a row changed between the page and
the POST is told "changed meanwhile", nothing done; a staff user without the action's
permission neither sees it nor can post it; texts from the tables are shown escaped."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from mideng.core.record import ClaimRequest, ExpiryPolicy
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


def test_no_one_adds_changes_or_deletes_not_even_a_superuser(shop: AdminShop) -> None:
    out = shop.run(
        "from django.contrib.auth.models import User\n"
        "from django.test import Client\n"
        "User.objects.create_superuser('root', password='x')\n"
        "c = Client()\n"
        "c.login(username='root', password='x')\n"
        "pages = (OUTBOX, RECORDS, OPERATIONS, STEPS)\n"
        "out = {p: [c.get(p).status_code, c.get(p + 'add/').status_code,"
        " 'delete_selected' in c.get(p).content.decode()] for p in pages}\n"
    )
    assert set(map(tuple, out.values())) == {(200, 403, False)}


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
changelist = OUTBOX
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
done = c.post(changelist, form(hidden(confirm)), follow=True)
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
    assert _audit(shop, shop.outbox) == [
        ("operator", "requeue", f"outbox row {i}", "dead after 1 attempts", "pending again")
        for i in picked
    ]


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


# -- records -------------------------------------------------------------------------------
def _claim(shop: AdminShop, scope: str, key: str, lease: float, expiry: ExpiryPolicy) -> None:
    guard = shop.guard()
    try:
        guard.store.claim(ClaimRequest(scope, key, uuid.uuid4().hex, lease, 60, None, expiry))
    finally:
        guard.close()


def _records(shop: AdminShop) -> None:
    """dj_shop/ok succeeded with markup for a result, dj_shop/long with 300 characters;
    dj_charge/u1 UNKNOWN (fence 1); dj_export/e1 processing, its lease run out; dj_export/e2
    processing, its lease live."""
    guard = shop.guard()
    try:
        guard.run("dj_shop", "ok", lambda: SCRIPT)
        guard.run("dj_shop", "long", lambda: "x" * 300)
    finally:
        guard.close()
    _claim(shop, "dj_charge", "u1", 0.1, ExpiryPolicy.UNKNOWN)
    _claim(shop, "dj_export", "e1", 0.1, ExpiryPolicy.TAKE_OVER)
    _claim(shop, "dj_export", "e2", 60, ExpiryPolicy.TAKE_OVER)
    time.sleep(0.25)  # the short leases run out (store time moves on)
    _claim(shop, "dj_charge", "u1", 0.1, ExpiryPolicy.UNKNOWN)  # turns it UNKNOWN


def _audit(shop: AdminShop, table: str) -> list[tuple[str, ...]]:
    """The audit rows beside ``table``, oldest first: operator, action, target, before, after."""
    from sqlalchemy import create_engine, text

    engine = create_engine(shop.url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT operator, action, target, state_before, state_after "
                    f"FROM {table}_audit ORDER BY id"
                )
            )
            return [tuple(row) for row in rows]
    finally:
        engine.dispose()


def _record(shop: AdminShop, scope: str, key: str) -> tuple[str, int] | None:
    guard = shop.guard()
    try:
        found = guard.store.get(scope, key)
    finally:
        guard.close()
    return None if found is None else (found.status.value, found.fence)


def test_records_list_filters_searches_and_escapes(shop: AdminShop) -> None:
    _records(shop)
    out = shop.run(
        "c = staff('viewer', 'mideng.view_recordlisting')\n"
        "pages = {q: text(c.get(RECORDS + q)) for q in ('', '?status=unknown', '?lease=expired',"
        " '?q=dj_charge', '?status=succeeded')}\n"
        "out = {q: records_listed(p) for q, p in pages.items()}\n"
        "out['escaped'] = '&lt;script&gt;alert(1)&lt;/script&gt;' in pages['']\n"
        f"out['raw'] = {SCRIPT!r} in pages['']\n"
        "out['actions'] = ['release' in pages[''], 'resolve_not_happened' in pages['']]\n"
        "out['cut'] = ['&quot;' + 'x' * 78 + '…' in pages[''], 'x' * 80 in pages['']]\n"
    )
    assert out[""] == [["dj_charge", "u1"], ["dj_export", "e1"], ["dj_export", "e2"],
                       ["dj_shop", "long"], ["dj_shop", "ok"]]  # fmt: skip
    assert out["?status=unknown"] == [["dj_charge", "u1"]]
    assert out["?lease=expired"] == [["dj_export", "e1"]]
    assert out["?q=dj_charge"] == [["dj_charge", "u1"]]
    assert out["?status=succeeded"] == [["dj_shop", "long"], ["dj_shop", "ok"]]
    assert out["cut"] == [True, False]  # 80 characters shown, the last an ellipsis
    assert (out["escaped"], out["raw"]) == (True, False)
    assert out["actions"] == [False, False]


RECORD_PAGE = """
c = staff('operator', 'mideng.view_recordlisting', {permission!r})
changelist = RECORDS
page = text(c.get(RECORDS))
seen = carried(page)
picked = [json.dumps(p) for p in {picked!r}]
asked = c.post(RECORDS, form([('action', {action!r}), ('index', '0')]
    + [('_selected_action', i) for i in picked]
    + [('seen-' + i, seen[i]) for i in picked if i in seen]))
confirm = text(asked)
out = {{'seen': seen, 'confirm': confirm}}
"""


def test_resolve_asks_then_settles_an_unknown_record(shop: AdminShop) -> None:
    _records(shop)
    out = shop.run(
        RECORD_PAGE.format(
            permission="mideng.resolve_record",
            picked=[["dj_charge", "u1"]],
            action="resolve_not_happened",
        )
        + CONFIRM
    )
    assert out["seen"]['["dj_charge", "u1"]'] == "unknown 1"
    assert "dj_charge / u1: unknown, fence 1" in out["confirm"]
    assert out["said"] == ["Resolved as not happened dj_charge / u1"]
    assert _record(shop, "dj_charge", "u1") == ("failed", 1)
    ((who, action, target, before, after),) = _audit(shop, shop.records)
    assert (action, target, before) == ("resolve", "dj_charge:u1", "unknown (fence 1)")
    assert after.startswith("failed (fence 1")
    assert who  # the signed-in user's name
    listed = shop.run(
        "c = staff('auditor', 'mideng.view_recordaudit')\n"
        "page = c.get('/admin/mideng/recordaudit/')\n"
        "out = {'status': page.status_code, 'text': text(page),"
        " 'add': c.get('/admin/mideng/recordaudit/add/').status_code}\n"
    )
    assert listed["status"] == 200
    assert "dj_charge:u1" in listed["text"]
    assert listed["add"] == 403  # read-only: the audit is only ever added to by mideng


def test_release_of_a_record_taken_over_meanwhile_does_nothing(shop: AdminShop) -> None:
    _records(shop)
    # Between the confirmation page and its POST a caller takes e1 over (fence 2): e1 is
    # left to it; e2 was never stuck (its lease is live), so it is not released either.
    takeover = (
        "from mideng import Guard, open_store\n"
        "from mideng.core.record import ClaimRequest, ExpiryPolicy\n"
        f"g = Guard(open_store({shop.url!r}, table={shop.records!r}, auto_upgrade=False))\n"
        "g.store.claim(ClaimRequest('dj_export', 'e1', 'other', 60, 60, None,"
        " ExpiryPolicy.TAKE_OVER))\n"
        "g.close()\n"
    )
    out = shop.run(
        RECORD_PAGE.format(
            permission="mideng.release_record",
            picked=[["dj_export", "e1"], ["dj_export", "e2"], ["dj_export", "gone"]],
            action="release",
        )
        + takeover
        + CONFIRM
    )
    assert out["said"] == [
        "Changed meanwhile, nothing done: dj_export / e1 is now processing, fence 2",
        "Changed meanwhile, nothing done: dj_export / e2 is now processing, fence 1",
        "Gone, nothing done: dj_export / gone",
    ]
    assert _record(shop, "dj_export", "e1") == ("processing", 2)


def test_release_done_and_refused_without_the_permission(shop: AdminShop) -> None:
    _records(shop)
    forged = shop.run(
        "c = staff('viewer', 'mideng.view_recordlisting', 'mideng.resolve_record')\n"
        "i = json.dumps(['dj_export', 'e1'])\n"
        "r = c.post(RECORDS, form([('action', 'release'), ('index', '0'), ('post', 'yes'),"
        " ('_selected_action', i), ('seen-' + i, 'processing 1')]))\n"
        "out = r.status_code\n"
    )
    assert forged == 403
    assert _record(shop, "dj_export", "e1") == ("processing", 1)
    out = shop.run(
        RECORD_PAGE.format(
            permission="mideng.release_record", picked=[["dj_export", "e1"]], action="release"
        )
        + CONFIRM
    )
    assert out["said"] == ["Released dj_export / e1"]
    assert _record(shop, "dj_export", "e1") is None


# -- operations ----------------------------------------------------------------------------
FAIL_PAY = """
import os
import shop_ops
os.environ['SHOP_DOWN'] = '1'
try:
    shop_ops.pay('o1')
except RuntimeError:
    pass
del os.environ['SHOP_DOWN']
"""

OPERATION_PAGE = """
c = staff('operator', 'mideng.view_operationlisting', 'mideng.view_steplisting',
          'mideng.reconcile_operation')
changelist = OPERATIONS
page = text(c.get(OPERATIONS))
seen = carried(page)
steps = text(c.get(STEPS + '?scope=dj_pay&key=o1'))
picked = [json.dumps(['dj_pay', 'o1'])]
asked = c.post(OPERATIONS, form([('action', 'reconcile'), ('index', '0')]
    + [('_selected_action', i) for i in picked]
    + [('seen-' + i, seen[i]) for i in picked if i in seen]))
confirm = text(asked)
out = {'seen': seen, 'confirm': confirm, 'steps': steps,
       'linked': '?scope=dj_pay&amp;key=o1' in page}
"""


def test_an_operation_lists_its_steps_and_reconcile_runs_it(shop: AdminShop) -> None:
    out = shop.run(FAIL_PAY + OPERATION_PAGE + CONFIRM)
    assert out["seen"] == {'["dj_pay", "o1"]': "released -"}
    assert out["linked"] is True
    assert "charge#1" in out["steps"]
    assert "dj_pay / o1: released -" in out["confirm"]
    assert out["said"] == ["Reconciled dj_pay / o1: finished paid"]


def test_reconcile_of_an_operation_finished_meanwhile_does_nothing(shop: AdminShop) -> None:
    # Between the confirmation page and its POST the operation's caller runs it to its end.
    out = shop.run(
        FAIL_PAY
        + OPERATION_PAGE
        + "shop_ops.pay('o1')\n"
        + CONFIRM
        + ("out['charged'] = shop_ops.charged\n")
    )
    # Finished, its kept steps are dropped: the operation is gone, and nothing ran again.
    assert out["said"] == ["Gone, nothing done: dj_pay / o1"]
    assert out["charged"] == ["o1"]  # charged by the first run only: the second replayed it


def test_reconcile_refused_without_the_permission(shop: AdminShop) -> None:
    out = shop.run(
        FAIL_PAY + "c = staff('viewer', 'mideng.view_operationlisting')\n"
        "i = json.dumps(['dj_pay', 'o1'])\n"
        "page = text(c.get(OPERATIONS))\n"
        "r = c.post(OPERATIONS, form([('action', 'reconcile'), ('index', '0'), ('post', 'yes'),"
        " ('_selected_action', i), ('seen-' + i, 'released -')]))\n"
        "out = {'status': r.status_code, 'action': 'reconcile' in page,"
        " 'charged': shop_ops.charged}\n"
    )
    assert out == {"status": 403, "action": False, "charged": ["o1"]}


def test_reconcile_of_an_operation_taken_meanwhile_is_changed(shop: AdminShop) -> None:
    # Between the confirmation page and its POST a caller claims the operation's record and
    # holds it: it is running now, so reconcile leaves it to that caller.
    hold = (
        "from mideng.contrib.django import guard\n"
        "from mideng.core.record import ClaimRequest, ExpiryPolicy\n"
        "guard().store.claim(ClaimRequest('dj_pay', 'o1', 'other', 60, 60, None,"
        " ExpiryPolicy.TAKE_OVER))\n"
    )
    out = shop.run(FAIL_PAY + OPERATION_PAGE + hold + CONFIRM)
    assert out["said"] == ["Changed meanwhile, nothing done: dj_pay / o1 is now running, fence 1"]
    assert _record(shop, "dj_pay", "o1") == ("processing", 1)
