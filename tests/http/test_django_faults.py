"""The Django middleware and token decorators facing a garbled Content-Length, a client that
stops sending, or a store that is down: Django's 400 or a 503, never a 500 or a lost token."""

from __future__ import annotations

import json
import uuid
from typing import Any

import django
import pytest

from mideng.errors import StoreUnavailableError
from mideng.stores.memory import MemoryStore
from mideng.tokens import TokenService


@pytest.fixture(scope="module", autouse=True)
def project() -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_SETTINGS_MODULE", "tests.http.djangoproject.settings")
        django.setup()


def key() -> str:
    return f'"{uuid.uuid4().hex}"'


def factory() -> Any:
    from django.test import RequestFactory

    return RequestFactory()


class Gone:
    """A request body the client stopped sending."""

    def read(self, *args: Any) -> bytes:
        raise OSError("connection reset mid-body (test)")

    def readline(self, *args: Any) -> bytes:
        raise OSError("connection reset mid-body (test)")

    def close(self) -> None:
        pass


@pytest.mark.parametrize("length", ["abc", "2, 2", "0x2"])
def test_a_garbled_content_length_is_a_bad_request_and_claims_nothing(length: str) -> None:
    """Django's own ``request.body`` reads CONTENT_LENGTH with int(): a server that passes a
    garbled one on (runserver does) made the middleware's read of the body a 500."""
    from django.core.exceptions import BadRequest

    from mideng.http.django import IdempotencyMiddleware
    from tests.http.djangoproject import views

    k = key()
    request = factory().generic(
        "POST", "/orders", b"{}", "application/json", HTTP_IDEMPOTENCY_KEY=k, CONTENT_LENGTH=length
    )
    with pytest.raises(BadRequest):
        IdempotencyMiddleware(views.orders)(request)
    assert views.runs[f"-/{k}"] == 0


def submit_view(tokens: TokenService, ran: list[int]) -> Any:
    from django.http import HttpResponse

    from mideng.http.django import require_token

    @require_token(tokens, lambda request: "u1:submit")
    def submit(request: Any) -> Any:
        ran.append(1)
        return HttpResponse(b"ok")

    return submit


def test_a_form_the_client_stopped_sending_is_a_bad_request_and_keeps_the_token() -> None:
    from django.core.exceptions import BadRequest

    tokens = TokenService(MemoryStore())
    ran: list[int] = []
    submit = submit_view(tokens, ran)
    token = tokens.issue("u1:submit")
    form = f"resubmit_token={token}".encode()
    request = factory().generic("POST", "/submit", form, "application/x-www-form-urlencoded")
    request._stream = Gone()
    with pytest.raises(BadRequest):
        submit(request)
    again = factory().generic("POST", "/submit", form, "application/x-www-form-urlencoded")
    assert submit(again).status_code == 200
    assert ran == [1]


def test_a_garbled_content_length_at_a_token_view_is_a_bad_request() -> None:
    from django.core.exceptions import BadRequest

    tokens = TokenService(MemoryStore())
    ran: list[int] = []
    submit = submit_view(tokens, ran)
    token = tokens.issue("u1:submit")
    form = f"resubmit_token={token}".encode()
    request = factory().generic(
        "POST", "/submit", form, "application/x-www-form-urlencoded", CONTENT_LENGTH="abc"
    )
    with pytest.raises(BadRequest):
        submit(request)
    assert ran == []


def test_the_token_view_with_the_store_down_is_503() -> None:
    from mideng.http.django import token_view

    class Down(MemoryStore):
        def put_token(self, scope: str, key: str, token: str, ttl: float) -> None:
            raise StoreUnavailableError("down (test)")

    issue = token_view(TokenService(Down()), lambda request: "u3:submit")
    answer: Any = issue(factory().post("/token"))
    assert answer.status_code == 503
    assert answer["Content-Type"] == "application/problem+json"
    assert json.loads(answer.content)["type"] == "urn:mideng:problem:store-unavailable"


def test_a_garbled_length_without_a_body_to_read_is_not_a_500_through_the_client() -> None:
    from django.test import Client

    answer = Client().generic(
        "POST",
        "/orders",
        b"{}",
        "application/json",
        HTTP_IDEMPOTENCY_KEY=key(),
        CONTENT_LENGTH="abc",
    )
    assert answer.status_code == 400
