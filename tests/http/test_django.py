"""The Django middleware and view decorators, through Django's test client, against the real
project in tests/http/djangoproject (configured here only, never for other tests)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import django
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mideng.core.record import ClaimRequest
from mideng.stores.memory import MemoryStore


@pytest.fixture(scope="module", autouse=True)
def project() -> None:
    # Settings are read once, here; the environment variable does not outlive the setup.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_SETTINGS_MODULE", "tests.http.djangoproject.settings")
        django.setup()


def client(**kwargs: Any) -> Any:
    from django.test import Client

    return Client(**kwargs)


def views() -> Any:
    from tests.http.djangoproject import views as module

    return module


def key() -> str:
    return f'"{uuid.uuid4().hex}"'


def post(
    c: Any,
    path: str,
    idem: str | None = None,
    body: bytes = b"{}",
    content_type: str = "application/json",
    **headers: str,
) -> Any:
    extra = {f"HTTP_{k.upper()}": v for k, v in headers.items()}
    if idem is not None:
        extra["HTTP_IDEMPOTENCY_KEY"] = idem
    return c.generic("POST", path, body, content_type, **extra)


def problem(response: Any, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/problem+json"
    doc: dict[str, Any] = json.loads(response.content)
    assert doc["type"] == f"urn:mideng:problem:{slug}"
    assert doc["status"] == status
    return doc


def runs(label: str) -> int:
    return int(views().runs[label])


def test_replay_returns_the_stored_response() -> None:
    c, k = client(), key()
    first = post(c, "/orders", k, b'{"a": 1, "b": 2}')
    again = post(c, "/orders", k, b'{"b":2,"a":1}')
    assert first.status_code == again.status_code == 201
    assert again.content == first.content
    assert again["Idempotent-Replayed"] == "true"
    assert again["X-Custom"] == "kept"
    assert again["Idempotency-Retention"] == "86400"
    assert "session" in first.cookies
    assert "session" not in again.cookies
    assert runs(f"-/{k}") == 1


def test_error_cases() -> None:
    c, k = client(), key()
    post(c, "/orders", k, b'{"a": 1}')
    problem(post(c, "/orders", k, b'{"a": 2}'), 422, "key-reused")
    problem(post(c, "/orders", '"open'), 400, "key-malformed")
    problem(post(c, "/orders", key(), b"x" * 2048), 413, "body-too-large")
    assert runs(f"-/{k}") == 1


def test_in_flight_key_is_409() -> None:
    c, k = client(), key()
    views().guard.store.claim(ClaimRequest("http:-", k.strip('"'), "someone", 30.0, 60.0))
    response = post(c, "/orders", k)
    problem(response, 409, "key-in-use")
    assert int(response["Retry-After"]) >= 1
    assert runs(f"-/{k}") == 0


def test_missing_key_where_required_is_400() -> None:
    from django.test import override_settings

    config = {"guard": "tests.http.djangoproject.views.guard", "required": True}
    with override_settings(MIDENG_HTTP=config):
        problem(post(client(), "/orders"), 400, "key-missing")
    assert post(client(), "/orders").status_code == 201


def test_5xx_and_view_exceptions_release_the_key() -> None:
    c, k = client(raise_request_exception=False), key()
    assert post(c, "/status/503", k).status_code == 503
    assert post(c, "/status/503", k).status_code == 503
    assert runs(f"-/{k}") == 2
    k2 = key()
    assert post(c, "/explode", k2).status_code == 500
    assert post(c, "/explode", k2).status_code == 500
    assert runs(f"-/{k2}") == 2


def test_principals_are_isolated() -> None:
    c, k = client(), key()
    a = post(c, "/orders", k, x_tenant="acme")
    b = post(c, "/orders", k, x_tenant="umbrella")
    assert json.loads(a.content)["nonce"] != json.loads(b.content)["nonce"]
    assert runs(f"acme/{k}") == runs(f"umbrella/{k}") == 1


def test_streams_are_captured_or_passed_through() -> None:
    c, k = client(), key()
    first = post(c, "/stream", k)
    again = post(c, "/stream", k)
    assert b"".join(first.streaming_content) == b"a" * 100 + b"b" * 100
    assert again.content == b"a" * 100 + b"b" * 100
    assert again["Idempotent-Replayed"] == "true"
    k2 = key()
    big = [post(c, "/big", k2) for _ in range(2)]
    assert all(len(b"".join(r.streaming_content)) == 10_000 for r in big)
    assert runs(f"-/{k2}") == 2


def test_store_down_is_503() -> None:
    from tests.http.http_apps import FlakyStore

    guard = views().guard
    flaky = FlakyStore()
    flaky.down = True
    saved, guard.store = guard.store, flaky
    try:
        k = key()
        problem(post(client(), "/orders", k), 503, "store-unavailable")
    finally:
        guard.store = saved
    assert runs(f"-/{k}") == 0


def test_a_store_io_error_is_503_and_a_failed_release_keeps_the_response() -> None:
    """A store that lets its driver's I/O error through: 503 before the view runs; a stream
    passed through stands when its release then fails."""
    from tests.http.http_apps import FaultyStore

    guard = views().guard
    saved = guard.store
    try:
        guard.store = FaultyStore(claim=ConnectionError("reset by peer (test)"))
        k = key()
        problem(post(client(), "/orders", k), 503, "store-unavailable")
        assert runs(f"-/{k}") == 0
        guard.store = FaultyStore(release=TimeoutError("timed out (test)"))
        k = key()
        big = post(client(), "/big", k)
        assert len(b"".join(big.streaming_content)) == 10_000
        assert runs(f"-/{k}") == 1
    finally:
        guard.store = saved


def test_request_id_is_bound_and_echoed() -> None:
    response = post(client(), "/orders", key(), x_request_id="dj-1")
    assert response["X-Request-Id"] == "dj-1"
    assert json.loads(response.content)["request_id"] == "dj-1"


# -- tokens and debounce on single views -----------------------------------------------------
def test_resubmit_token_flow() -> None:
    c = client()
    user = uuid.uuid4().hex
    issued = json.loads(post(c, "/token", x_user=user).content)
    assert issued["expires_in"] == 60
    token = issued["token"]
    problem(post(c, "/submit", x_user=user), 400, "token-missing")
    assert post(c, "/submit", x_user=user, x_resubmit_token=token).status_code == 200
    problem(post(c, "/submit", x_user=user, x_resubmit_token=token), 409, "token-rejected")
    # A failed run (5xx) gives the token back.
    token = json.loads(post(c, "/token", x_user=user).content)["token"]
    assert post(c, "/submit", x_user=user, x_resubmit_token=token, x_fail="1").status_code == 503
    form = f"resubmit_token={token}".encode()
    response = post(c, "/submit", None, form, "application/x-www-form-urlencoded", x_user=user)
    assert response.status_code == 200
    # A token is bound to its business key.
    other = json.loads(post(c, "/token", x_user=user).content)["token"]
    problem(
        post(c, "/submit", x_user="someone-else", x_resubmit_token=other), 409, "token-rejected"
    )


def test_debounce_refuses_the_second_call_with_429() -> None:
    c, user = client(), uuid.uuid4().hex
    assert post(c, "/create", x_user=user).status_code == 201
    refused = post(c, "/create", x_user=user)
    problem(refused, 429, "too-soon")
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert post(c, "/create", x_user=uuid.uuid4().hex).status_code == 201


# -- property --------------------------------------------------------------------------------
latin1 = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=255), max_size=40)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    method=st.sampled_from(["POST", "PATCH", "PUT", "DELETE", "GET"]),
    idem=st.one_of(st.none(), latin1, st.uuids().map(lambda u: f'"{u}"')),
    tenant=st.one_of(st.none(), latin1),
    rid=st.one_of(st.none(), latin1),
    content_type=st.sampled_from(["application/json", "text/plain", 'x/y; q="1"']),
    body=st.binary(max_size=300),
)
def test_property_never_500_never_twice(
    method: str,
    idem: str | None,
    tenant: str | None,
    rid: str | None,
    content_type: str,
    body: bytes,
) -> None:
    views().guard.store = MemoryStore()
    c = client()
    extra = {
        name: value
        for name, value in (
            ("HTTP_IDEMPOTENCY_KEY", idem),
            ("HTTP_X_TENANT", tenant),
            ("HTTP_X_REQUEST_ID", rid),
        )
        if value is not None
    }
    before = sum(views().runs.values())
    first = c.generic(method, "/orders", body, content_type, **extra)
    middle = sum(views().runs.values())
    second = c.generic(method, "/orders", body, content_type, **extra)
    assert first.status_code != 500
    assert second.status_code != 500
    if first.has_header("Idempotency-Retention") and first.status_code == 201:
        assert middle - before == 1
        assert sum(views().runs.values()) == middle
        assert second.content == first.content


# -- the request's headers and a replay's response, as Django itself would make them ----------
@pytest.mark.parametrize(
    "meta",
    [
        {"HTTP_IDEMPOTENCY_KEY": '"k"', "CONTENT_TYPE": "application/json", "PATH_INFO": "/"},
        {"CONTENT_TYPE": "", "CONTENT_LENGTH": "0", "SERVER_NAME": "x"},  # empty, still a field
        {"CONTENT_TYPE": "text/plain", "HTTP_CONTENT_TYPE": "application/json"},  # later wins
        {"HTTP_CONTENT_TYPE": "application/json", "CONTENT_TYPE": "text/plain"},
        {"HTTP_": "nameless", "HTTP_X_A_B": "1", "HTTP_x_lower": "2", "wsgi.input": object()},
        {"HTTP_X_LATIN": "caf\xe9", "HTTP_\xdf_NAME": "odd"},
    ],
)
def test_header_fields_read_meta_as_request_headers_does(meta: dict[str, Any]) -> None:
    from django.http.request import HttpHeaders

    from mideng.http.django import header_fields

    expected = {name.lower(): value for name, value in HttpHeaders(meta).items()}
    got = header_fields(meta)
    assert got == expected
    assert list(got) == list(expected)  # the same order, so repeated reads join alike


@pytest.mark.parametrize(
    "headers",
    [
        (("content-type", "application/json"), ("x-a", "1")),
        (("x-a", "1"),),  # no content type stored: none sent, not Django's default
        (("x-a", "1"), ("x-a", "2"), ("content-type", "text/plain")),  # joined, in order
    ],
)
def test_to_django_sends_only_what_was_stored(headers: tuple[tuple[str, str], ...]) -> None:
    from mideng.http.core import StoredResponse
    from mideng.http.django import to_django

    native = to_django(StoredResponse(201, headers, b"body"))
    joined: dict[str, str] = {}
    for name, value in headers:
        joined[name] = f"{joined[name]}, {value}" if name in joined else value
    assert native.status_code == 201
    assert native.content == b"body"
    assert {name.lower(): value for name, value in native.items()} == joined


def test_a_body_another_middleware_consumed_is_a_plain_configuration_error() -> None:
    """A middleware ahead of ours read ``request.POST`` of a multipart form: the body is gone,
    and the error says which order the middlewares need (not Django's stream message)."""
    from django.core.exceptions import ImproperlyConfigured
    from django.test import RequestFactory

    from mideng.http.django import IdempotencyMiddleware

    ran: list[int] = []

    def view(request: Any) -> Any:
        ran.append(1)

    middleware = IdempotencyMiddleware(view)
    request = RequestFactory().post("/orders", {"item": "pen"}, HTTP_IDEMPOTENCY_KEY=key())
    assert request.POST["item"] == "pen"  # read from the stream, as such a middleware does
    with pytest.raises(ImproperlyConfigured, match="before any middleware that reads"):
        middleware(request)
    assert ran == []


def test_a_body_the_client_stopped_sending_is_a_bad_request_and_claims_nothing() -> None:
    from django.core.exceptions import BadRequest
    from django.test import RequestFactory

    from mideng.http.django import IdempotencyMiddleware

    class Gone:
        def read(self, *args: Any) -> bytes:
            raise OSError("connection reset mid-body (test)")

        def close(self) -> None:
            pass

    k = key()
    middleware = IdempotencyMiddleware(views().orders)
    request = RequestFactory().generic(
        "POST", "/orders", b"{}", "application/json", HTTP_IDEMPOTENCY_KEY=k
    )
    request._stream = Gone()  # type: ignore[assignment]
    with pytest.raises(BadRequest):
        middleware(request)
    assert runs(f"-/{k}") == 0
    assert post(client(), "/orders", k).status_code == 201  # the key was never claimed
    assert runs(f"-/{k}") == 1


# -- @idempotent_view: each kind of view, through the test client ----------------------------------
#: (path, the view's name in its run labels, the headers that sign a user in to it): Django's
#: views read request.user from X-User, DRF's from the user DRF authenticated.
VIEW_KINDS = [
    ("/v/fbv", "fbv", lambda user: {"x_user": user}),
    ("/v/afbv", "afbv", lambda user: {"x_user": user}),
    ("/v/cbv", "cbv", lambda user: {"x_user": user}),
    ("/v/apiview", "apiview", lambda user: {"authorization": f"User {user}"}),
    ("/v/viewset/place", "viewset", lambda user: {"authorization": f"User {user}"}),
]
view_kinds = pytest.mark.parametrize(("path", "name", "signed_in"), VIEW_KINDS)


def view_runs(name: str, user: str, idem: str) -> int:
    from tests.http.djangoproject import decorated

    return int(decorated.runs[f"{name}/{user}/{idem}"])


@view_kinds
def test_a_decorated_view_runs_once_and_replays(path: str, name: str, signed_in: Any) -> None:
    c, k = client(), key()
    first = post(c, path, k, b'{"a": 1, "b": 2}', **signed_in("alice"))
    again = post(c, path, k, b'{"b":2,"a":1}', **signed_in("alice"))
    assert first.status_code == again.status_code == 201
    assert again.content == first.content
    assert json.loads(first.content)["body"] == {"a": 1, "b": 2}
    assert again["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first
    assert view_runs(name, "alice", k) == 1


@view_kinds
def test_a_decorated_view_refuses_a_key_reused_with_another_payload(
    path: str, name: str, signed_in: Any
) -> None:
    c, k = client(), key()
    assert post(c, path, k, b'{"a": 1}', **signed_in("alice")).status_code == 201
    problem(post(c, path, k, b'{"a": 2}', **signed_in("alice")), 422, "key-reused")
    problem(post(c, path, '"open', b'{"a": 1}', **signed_in("alice")), 400, "key-malformed")
    assert view_runs(name, "alice", k) == 1


@view_kinds
def test_a_decorated_views_keys_are_the_users(path: str, name: str, signed_in: Any) -> None:
    c, k = client(), key()
    answers = [post(c, path, k, b'{"a": 1}', **signed_in(user)) for user in ("alice", "bob")]
    answers.append(post(c, path, k, b'{"a": 1}'))  # no one signed in: the anonymous scope
    assert [a.status_code for a in answers] == [201, 201, 201]
    assert json.loads(answers[0].content)["nonce"] != json.loads(answers[1].content)["nonce"]
    assert "Idempotent-Replayed" not in answers[1]
    assert view_runs(name, "alice", k) == view_runs(name, "bob", k) == view_runs(name, "-", k) == 1


@view_kinds
def test_a_decorated_view_never_runs_a_duplicate_of_a_call_in_progress(
    path: str, name: str, signed_in: Any
) -> None:
    k = key()
    views().guard.store.claim(ClaimRequest("http:alice", k.strip('"'), "someone", 30.0, 60.0))
    response = post(client(), path, k, b"{}", **signed_in("alice"))
    problem(response, 409, "key-in-use")
    assert int(response["Retry-After"]) >= 1
    assert view_runs(name, "alice", k) == 0


def test_drf_views_scope_keys_by_the_user_drf_authenticated() -> None:
    c, k = client(), key()
    for user in ("alice", "bob"):  # one X-User, two DRF users: two runs
        post(c, "/v/apiview", k, b"{}", x_user="carol", authorization=f"User {user}")
    assert view_runs("apiview", "alice", k) == view_runs("apiview", "bob", k) == 1


def test_per_view_options_required_and_methods() -> None:
    c = client()
    problem(post(c, "/v/cbv", None, x_user="alice"), 400, "key-missing")
    assert c.get("/v/cbv").status_code == 200  # a method not guarded passes by
    k = key()
    put = [c.generic("PUT", "/v/cbv/7", b"{}", HTTP_IDEMPOTENCY_KEY=k) for _ in range(2)]
    assert [r.status_code for r in put] == [200, 200]
    assert put[1]["Idempotent-Replayed"] == "true"
    assert json.loads(put[1].content)["body"] == [7, {}]
    assert view_runs("cbv-put", "-", k) == 1


def test_the_middleware_lets_decorated_views_by() -> None:
    # Under /v/ the middleware's route is guarded=False: one guard, the view's, whose scope
    # is the user's, never the middleware's tenant.
    c, k = client(), key()
    for tenant in ("t1", "t2"):
        post(c, "/v/fbv", k, b"{}", x_user="alice", x_tenant=tenant)
    assert view_runs("fbv", "alice", k) == 1


def test_the_decorator_imports_nothing_of_drf() -> None:
    import subprocess
    import sys

    probe = "import sys, mideng.http.django; print('rest_framework' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_template_response_is_rendered_before_it_is_stored() -> None:
    c, k = client(), key()
    first, again = (post(c, "/v/templated", k, x_user="alice") for _ in range(2))
    assert first.content == again.content == b"order 1"
    assert again["Idempotent-Replayed"] == "true"
    assert view_runs("templated", "alice", k) == 1
