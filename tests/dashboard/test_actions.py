"""The dashboard's actions over SQLite, PostgreSQL and the memory store, through the ASGI app:
each is refused without its typed confirmation and changes nothing, a dry run changes
nothing and says what would be done, a confirmed one is done with one audit line; a change
made between the operator's look and the action gives a 409 and nothing done."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Iterator

import pytest

from mideng.core.record import ClaimRequest, Outcome
from mideng.dashboard import app
from mideng.dashboard.exchange import CSRF_COOKIE
from tests.dashboard.client import Client
from tests.dashboard.data import Seeded
from tests.dashboard.forms import form_fields

ORIGIN = {"origin": "http://127.0.0.1"}
FAMILIES = ("memory", "sqlite", "postgresql")
RECORDS = 5


@pytest.fixture
def client(filled: Seeded) -> Iterator[Client]:
    dashboard = app(filled.guard, filled.db_url, outbox_table=filled.outbox_table, actions=True)
    with Client(dashboard) as c:
        yield c
        c.run(dashboard.aclose())
        c.run(filled.store.aclose())


def _form(c: Client, path: str, form_id: str) -> dict[str, str]:
    page = c.get(path)
    assert page.status_code == 200, page.text[:300]
    return form_fields(page.text, form_id)


def _post(c: Client, action: str, fields: dict[str, str], **more: str) -> tuple[int, str]:
    reply = c.post(f"/actions/{action}", data={**fields, **more}, headers=ORIGIN)
    return reply.status_code, reply.text


def _audit(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "mideng.audit"]


def test_resolve_needs_its_confirmation_a_dry_run_changes_nothing(
    client: Client, filled: Seeded, caplog: pytest.LogCaptureFixture
) -> None:
    charge = filled.scope("charge")
    fields = _form(client, f"/record?scope={charge}&key=c1", "resolve")
    assert fields["status"] == "unknown"
    status, page = _post(client, "resolve", {**fields, "result": '{"charged": true}'})
    assert status == 400
    assert "type &#x27;c1&#x27; in the confirmation box" in page
    status, page = _post(client, "resolve", fields, dry_run="1")
    assert status == 200
    assert 'id="would"' in page
    record = filled.guard.get(charge, "c1")
    assert record is not None
    assert record.status.value == "unknown"
    assert _audit(caplog) == []
    status, page = _post(client, "resolve", {**fields, "result": '{"charged": true}'}, confirm="c1")
    assert status == 200, page
    assert 'id="done"' in page
    record = filled.guard.get(charge, "c1")
    assert record is not None
    assert record.status.value == "succeeded"
    assert filled.guard.run(charge, "c1", lambda: {"charged": False}) == {"charged": True}
    (line,) = _audit(caplog)
    assert line.mideng_operator == "local operator"  # type: ignore[attr-defined]
    assert line.mideng_action == "resolve"  # type: ignore[attr-defined]
    assert line.mideng_before == f"unknown (fence {fields['fence']})"  # type: ignore[attr-defined]
    assert line.mideng_after.startswith("succeeded")  # type: ignore[attr-defined]


def test_resolve_as_failed_and_release(client: Client, filled: Seeded) -> None:
    charge = filled.scope("charge")
    fields = _form(client, f"/record?scope={charge}&key=c1", "resolve")
    status, _ = _post(client, "resolve", {**fields, "outcome": "failed"}, confirm="c1")
    assert status == 200
    ran = []
    filled.guard.run(charge, "c1", lambda: ran.append(1))
    assert ran == [1]  # it did not happen: the next call ran
    fields = _form(client, f"/record?scope={charge}&key=c2", "release")
    status, page = _post(client, "release", fields, confirm="c2")
    assert status == 200, page
    assert filled.guard.get(charge, "c2") is None
    stuck = _form(client, f"/record?scope={filled.scope('job')}&key=stuck-1", "release")
    assert _post(client, "release", stuck, confirm="stuck-1")[0] == 200
    assert filled.guard.get(filled.scope("job"), "stuck-1") is None


def test_a_change_since_the_look_is_a_409_and_nothing_done(
    client: Client, filled: Seeded, caplog: pytest.LogCaptureFixture
) -> None:
    charge = filled.scope("charge")
    fields = _form(client, f"/record?scope={charge}&key=c1", "resolve")
    filled.guard.resolve(charge, "c1", result={"by": "someone else"})  # meanwhile
    status, page = _post(client, "resolve", {**fields, "result": '{"by": "me"}'}, confirm="c1")
    assert status == 409
    assert 'id="changed"' in page
    assert filled.guard.run(charge, "c1", lambda: None) == {"by": "someone else"}
    released = _form(client, f"/record?scope={charge}&key=c2", "release")
    filled.guard.resolve(charge, "c2", failed=True)
    assert _post(client, "release", released, confirm="c2")[0] == 409
    record = filled.guard.get(charge, "c2")
    assert record is not None
    assert record.status.value == "failed"
    assert _post(client, "resolve", {**fields, "result": "1"}, dry_run="1")[0] == 409
    assert _audit(caplog) == []


def test_requeue_one_row_then_again_is_a_409(
    client: Client, filled: Seeded, caplog: pytest.LogCaptureFixture
) -> None:
    row_id = filled.dead_ids[0]
    fields = _form(client, f"/outbox/row?id={row_id}", "requeue")
    assert fields["rows"] == f"{row_id}:5"
    assert _post(client, "requeue", fields)[0] == 400
    assert _post(client, "requeue", fields, dry_run="1")[0] == 200
    assert filled.row_state(row_id) == (2, 5)
    status, page = _post(client, "requeue", fields, confirm=row_id)
    assert status == 200, page
    assert filled.row_state(row_id) == (0, 0)
    assert len(_audit(caplog)) == 1
    status, page = _post(client, "requeue", fields, confirm=row_id)
    assert status == 409
    assert "pending after 0 attempts" in page


def test_bulk_requeue_of_the_page(client: Client, filled: Seeded) -> None:
    fields = _form(client, f"/outbox?state=dead&destination={filled.prefix}.orders", "requeue-all")
    assert len(fields["rows"].split(",")) == 3
    assert _post(client, "requeue", fields, confirm="requeue 2")[0] == 400
    status, page = _post(client, "requeue", fields, dry_run="1")
    assert status == 200
    assert page.count("would be done") == 3
    assert all(filled.row_state(r) == (2, 5) for r in filled.dead_ids)
    # One of them is requeued by someone else meanwhile: the rest are done, that one is not.
    one = _form(client, f"/outbox/row?id={filled.dead_ids[1]}", "requeue")
    assert _post(client, "requeue", one, confirm=filled.dead_ids[1])[0] == 200
    status, page = _post(client, "requeue", fields, confirm="requeue 3")
    assert status == 409
    assert page.count(">done<") == 2
    assert all(filled.row_state(r) == (0, 0) for r in filled.dead_ids)


class Declined(Exception):
    pass


def test_reconcile_runs_the_operation_as_seen(client: Client, filled: Seeded) -> None:
    scope = filled.scope("op")
    failing = threading.Event()
    failing.set()

    @filled.guard.step("charge")
    def charge(order: str) -> str:
        if failing.is_set():
            raise Declined(order)
        return f"charged {order}"

    @filled.guard.operation(scope, key="{order}", steps=("charge",))
    def pay(order: str) -> str:
        return charge(order)

    for order in ("o1", "o2"):
        with pytest.raises(Declined):
            pay(order)
    fields = _form(client, f"/operation?scope={scope}&key=o1", "reconcile")
    assert fields["state"] == "released"
    assert _post(client, "reconcile", fields)[0] == 400
    assert _post(client, "reconcile", fields, dry_run="1")[0] == 200
    failing.clear()
    status, page = _post(client, "reconcile", fields, confirm="o1")
    assert status == 200, page
    assert "finished" in page
    assert pay("o1") == "charged o1"
    seen = _form(client, f"/operation?scope={scope}&key=o2", "reconcile")
    assert pay("o2") == "charged o2"  # its caller finished it meanwhile
    assert _post(client, "reconcile", seen, confirm="o2")[0] == 409


def test_bulk_resolve_of_the_unknown_page(client: Client, filled: Seeded) -> None:
    charge = filled.scope("charge")
    fields = _form(client, f"/records?scope={charge}&status=unknown", "resolve-all")
    assert fields["outcome"] == "failed"
    assert _post(client, "resolve-many", fields, confirm="resolve 1")[0] == 400
    status, page = _post(client, "resolve-many", fields, dry_run="1")
    assert status == 200
    assert page.count("would be done") == 2
    assert all(_status(filled, charge, key) == "unknown" for key in ("c1", "c2"))
    # c2 is settled by someone else meanwhile: c1 is done, c2 is not, and the answer says so.
    filled.guard.resolve(charge, "c2", result={"by": "someone else"})
    status, page = _post(client, "resolve-many", fields, confirm="resolve 2")
    assert status == 409
    assert page.count(">done<") == 1
    assert _status(filled, charge, "c1") == "failed"
    assert filled.guard.run(charge, "c2", lambda: None) == {"by": "someone else"}


def test_bulk_resolve_with_a_result_each_replays(client: Client, filled: Seeded) -> None:
    charge = filled.scope("charge")
    fields = _form(client, f"/records?scope={charge}&status=unknown", "resolve-all")
    more = {"outcome": "result", "result": '{"charged": true}'}
    status, page = _post(client, "resolve-many", {**fields, **more}, confirm="resolve 2")
    assert status == 200, page
    for key in ("c1", "c2"):
        assert filled.guard.run(charge, key, lambda: None) == {"charged": True}


def test_bulk_release_of_the_expired_leases_only(client: Client, filled: Seeded) -> None:
    job = filled.scope("job")
    live = filled.store.claim(ClaimRequest(job, "live-1", uuid.uuid4().hex, 3600.0, 3600.0))
    assert live.outcome is Outcome.ACQUIRED
    page = client.get(f"/records?scope={job}&status=processing").text
    assert "live-1" in page
    assert "<title>records · mideng</title>" in page  # the bulk form is in the page's body only
    fields = form_fields(page, "release-expired")
    assert [r[1] for r in json.loads(fields["records"])] == ["stuck-1"]
    assert _post(client, "release-many", fields, dry_run="1")[0] == 200
    status, page = _post(client, "release-many", fields, confirm="release 1")
    assert status == 200, page
    assert filled.guard.get(job, "stuck-1") is None
    assert _status(filled, job, "live-1") == "processing"
    # The same page's form again: the record is gone, nothing is done, 409.
    assert _post(client, "release-many", fields, confirm="release 1")[0] == 409


def test_a_bulk_form_not_as_a_page_writes_it_is_a_400(client: Client) -> None:
    assert client.get("/records").status_code == 200
    csrf = client.http.cookies[CSRF_COOKIE]
    for records in ("", "[]", "{}", "[1]", '[["s", "k", "gone", 1]]', '[["", "k", "unknown", 1]]'):
        fields = {"csrf": csrf, "records": records, "outcome": "failed", "confirm": "resolve 1"}
        reply = client.post("/actions/resolve-many", data=fields, headers=ORIGIN)
        assert reply.status_code == 400, (records, reply.text[:300])


def _status(filled: Seeded, scope: str, key: str) -> str | None:
    record = filled.guard.get(scope, key)
    return None if record is None else record.status.value
