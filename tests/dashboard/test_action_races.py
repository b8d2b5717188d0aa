"""Operators acting on the same thing at once, through a served dashboard: many threads, and
several processes, post the same action as seen; exactly one is done, every other answers
409, and the thing changed once."""

from __future__ import annotations

import multiprocessing
from typing import Any

import httpx

from tests.dashboard.data import Seeded
from tests.dashboard.forms import form_fields
from tests.helpers.together import together

THREADS = 8
PROCESSES = 3
FAMILIES = ("sqlite", "postgresql")
RECORDS = 2


def post_as_seen(site: str, action: str, fields: dict[str, str], barrier: Any, out: Any) -> None:
    """One operator process: its own CSRF cookie, then, with the others, the action posted
    with the fields every operator saw."""
    with httpx.Client(base_url=site, timeout=30) as client:
        client.get("/")
        data = {**fields, "csrf": client.cookies["mideng_csrf"]}
        barrier.wait()
        reply = client.post(f"/actions/{action}", data=data, headers={"origin": site})
        out.put(reply.status_code)


def test_threads_resolving_one_record_do_it_once(acting: str, filled: Seeded) -> None:
    charge = filled.scope("charge")
    page = f"/record?scope={charge}&key=c1"
    with httpx.Client(base_url=acting) as client:
        fields = form_fields(client.get(page).text, "resolve")
        csrf = client.cookies["mideng_csrf"]

        def operator(n: int) -> list[int]:
            data = {**fields, "result": str(n), "confirm": "c1", "csrf": csrf}
            reply = httpx.post(
                f"{acting}/actions/resolve",
                data=data,
                headers={"origin": acting},
                cookies={"mideng_csrf": csrf},
                timeout=30,
            )
            return [reply.status_code]

        statuses = together(THREADS, operator)
    assert sorted(statuses) == [200] + [409] * (THREADS - 1)
    record = filled.guard.get(charge, "c1")
    assert record is not None
    assert record.status.value == "succeeded"
    assert record.fence == int(fields["fence"])


def test_processes_requeueing_one_row_do_it_once(acting: str, filled: Seeded) -> None:
    row_id = filled.dead_ids[0]
    with httpx.Client(base_url=acting) as client:
        fields = form_fields(client.get(f"/outbox/row?id={row_id}").text, "requeue")
    assert fields["rows"] == f"{row_id}:5"
    context = multiprocessing.get_context("spawn")
    barrier, out = context.Barrier(PROCESSES), context.Queue()
    seen = {**fields, "confirm": row_id}
    workers = [
        context.Process(target=post_as_seen, args=(acting, "requeue", seen, barrier, out))
        for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    statuses = sorted(out.get(timeout=60) for _ in workers)
    for worker in workers:
        worker.join(30)
    assert statuses == [200] + [409] * (PROCESSES - 1)
    assert filled.row_state(row_id) == (0, 0)
