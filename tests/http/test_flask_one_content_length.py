"""Every response the Flask view decorator makes itself (a replay, a refusal) carries one
Content-Length. The stored or problem headers carry one and the native response set its
own beside it: two fields, which HTTP lets a client refuse as a malformed message (and some,
Node's parser among them, do) — a replay the client could not read where the first response
was fine."""

from __future__ import annotations

import uuid
from typing import Any

import flask
import pytest

from mideng import Guard
from mideng.http.flask import idempotent
from mideng.stores.memory import MemoryStore


def build(status: int) -> flask.Flask:
    app = flask.Flask(__name__)

    @app.post("/orders")
    @idempotent(Guard(MemoryStore()), required=True)
    def create() -> tuple[dict[str, Any], int]:
        return {"ok": True}, status

    return app


@pytest.mark.parametrize("status", [200, 201, 204, 404])
def test_a_replay_has_one_content_length_as_the_first_response(status: int) -> None:
    client = build(status).test_client()
    key = {"Idempotency-Key": f'"{uuid.uuid4().hex}"'}
    first = client.post("/orders", json={}, headers=key)
    again = client.post("/orders", json={}, headers=key)
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.status_code == first.status_code == status
    assert again.data == first.data
    assert again.headers.getlist("Content-Length") == first.headers.getlist("Content-Length")
    assert again.headers.getlist("Content-Type") == first.headers.getlist("Content-Type")


@pytest.mark.parametrize(
    "headers", [{}, {"Idempotency-Key": '"a", "b"'}], ids=["key-missing", "key-malformed"]
)
def test_a_refusal_has_one_content_length(headers: dict[str, str]) -> None:
    refused = build(201).test_client().post("/orders", json={}, headers=headers)
    assert refused.status_code == 400
    assert refused.headers.getlist("Content-Length") == [str(len(refused.data))]
    assert refused.headers.getlist("Content-Type") == ["application/problem+json"]
