"""Scopes and fingerprints are one-to-one: two requests whose path bytes differ are two requests
(422 for one key), and every principal the application returns gets a scope of its own, on
each integration."""

from __future__ import annotations

import hashlib
import io
import json
import uuid
from collections.abc import Iterator
from typing import Any

import django
import flask
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mideng import Guard
from mideng.core.keys import MAX_SCOPE_LENGTH, check_scope
from mideng.http import asgi, wsgi
from mideng.http.core import HttpOptions, Incoming
from mideng.http.flask import idempotent
from mideng.http.headers import Headers
from mideng.http.identity import principal_scope
from mideng.stores.memory import MemoryStore
from tests.http.http_serve import FRAMEWORKS, Served, serve
from tests.http.http_servers import waitress_server

LONG = "t" * 1000
# Each pair here met in one scope under some earlier or naive mapping: NUL dropped or refused,
# a lone surrogate spelled as its escape, a long principal hashed to what another principal
# may simply be called, a principal named like the anonymous caller.
PRINCIPALS = [
    "acme",
    "acme\x00",
    "acme\x00evil",
    "\udcff",
    "\\udcff",
    "caf\u00e9",
    LONG,
    LONG[:-1] + "u",
    "#" + hashlib.sha256(LONG.encode()).hexdigest()[:40],
    "-",
    "",
]


def options(**kwargs: Any) -> HttpOptions:
    return HttpOptions(guard=Guard(MemoryStore()), **kwargs)


def key() -> str:
    return f'"{uuid.uuid4().hex}"'


# -- the mappings ----------------------------------------------------------------------------
def test_every_principal_gets_a_valid_scope_of_its_own() -> None:
    scopes = [principal_scope("http", who) for who in [None, *PRINCIPALS]]
    for scope in scopes:
        assert check_scope(scope) == scope
    # None and "" are both "no principal"; every other pair is apart.
    assert scopes[0] == scopes[-1] == "http:-"
    assert len(set(scopes[:-1])) == len(scopes) - 1
    assert scopes == [principal_scope("http", who) for who in [None, *PRINCIPALS]]


def test_ordinary_principals_keep_their_scopes() -> None:
    assert principal_scope("http", "acme") == "http:acme"
    assert principal_scope("http", "tenant 7:eu") == "http:tenant 7:eu"
    assert principal_scope("http", "caf\u00e9") == "http:caf\u00e9"
    # A long principal is hashed as it always was.
    assert (
        principal_scope("http", LONG) == "http:#" + hashlib.sha256(LONG.encode()).hexdigest()[:40]
    )
    longest = "p" * 64
    assert len(principal_scope(longest, LONG)) <= MAX_SCOPE_LENGTH


@given(st.text(), st.text(), st.sampled_from(["http", "p" * 64]))
def test_principal_scopes_are_valid_and_one_to_one(a: str, b: str, prefix: str) -> None:
    scope_a, scope_b = principal_scope(prefix, a), principal_scope(prefix, b)
    assert check_scope(scope_a) == scope_a
    assert (scope_a == scope_b) == (a == b)


def asgi_request(raw_path: bytes, path: str) -> Incoming:
    return asgi.incoming(
        {"method": "POST", "path": path, "raw_path": raw_path, "query_string": b"", "headers": []}
    )


def wsgi_request(path_info: str) -> Incoming:
    return wsgi.incoming(
        {
            "REQUEST_METHOD": "POST",
            "SCRIPT_NAME": "",
            "PATH_INFO": path_info,
            "QUERY_STRING": "",
            "wsgi.input": io.BytesIO(),
        }
    )


def test_undecodable_paths_keep_their_bytes_apart() -> None:
    opts = options()

    def path(request: Incoming) -> Any:
        return opts.payload(request, b"")["path"]

    ff, fe = path(wsgi_request("/pay/\xff")), path(wsgi_request("/pay/\xfe"))
    assert ff != fe
    assert path(asgi_request(b"/pay/%FF", "/pay/\ufffd")) == ff
    assert path(asgi_request(b"/pay/%FE", "/pay/\ufffd")) == fe
    # Nor does an undecodable byte meet the text its replacement or its escape reads as.
    assert ff not in (path(wsgi_request("/pay/\xef\xbf\xbd")), path(wsgi_request("/pay/%FF")))


def test_a_utf8_path_fingerprints_as_before_and_alike_everywhere() -> None:
    opts = options()
    over_asgi = opts.payload(asgi_request(b"/caf%C3%A9", "/caf\u00e9"), b"")
    over_wsgi = opts.payload(wsgi_request("/caf\xc3\xa9"), b"")
    hand_made = opts.payload(Incoming("POST", "/caf\u00e9", "", Headers([])), b"")
    assert over_asgi == over_wsgi == hand_made
    assert over_wsgi["path"] == "/caf\u00e9"


def test_text_fields_never_meet_their_escapes() -> None:
    opts = options(fingerprint_headers=["x-variant"])

    def payload(text: str) -> Any:
        request = Incoming(text, "/" + text, text, Headers([("x-variant", text)]))
        return opts.payload(request, b"")

    lone, spelled = payload("\udcff"), payload("\\udcff")
    for field in ("method", "path", "query"):
        assert lone[field] != spelled[field], field
    assert lone["headers"] != spelled["headers"]


# -- over real servers: FastAPI under uvicorn, Flask under waitress -------------------------
def principal_from_json(request: Incoming) -> str | None:
    """The test's principal: any string, sent JSON-encoded in X-Tenant (NUL and lone
    surrogates can't travel in a header as themselves)."""
    sent = request.headers.get("x-tenant")
    return None if sent is None else str(json.loads(sent))


@pytest.fixture(scope="module", params=FRAMEWORKS)
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    with serve(request.param, principal=principal_from_json) as running:
        yield running


@pytest.fixture
def client(served: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, timeout=30.0) as c:
        yield c


def post(client: httpx.Client, path: str, idem: str, **headers: str) -> httpx.Response:
    sent = {name.replace("_", "-"): value for name, value in headers.items()}
    return client.post(path, json={"x": 1}, headers={"idempotency-key": idem, **sent})


def assert_paths_are_told_apart(client: httpx.Client, base: str) -> None:
    k = key()
    first = post(client, f"{base}/%FF", k)
    assert first.status_code in (200, 404)
    assert post(client, f"{base}/%FF", k).headers["idempotent-replayed"] == "true"
    for other in ("%FE", "%25FF", "%EF%BF%BD"):
        again = post(client, f"{base}/{other}", k)
        assert again.status_code == 422, (other, again.text)


def test_undecodable_paths_are_different_requests(client: httpx.Client) -> None:
    assert_paths_are_told_apart(client, "/pay")


def test_each_principal_reads_only_its_own_responses(served: Served, client: httpx.Client) -> None:
    k = key()
    sent = [json.dumps(who) for who in PRINCIPALS[:-1]]  # "" is the anonymous caller
    first = {tenant: post(client, "/orders", k, x_tenant=tenant) for tenant in sent}
    anonymous = post(client, "/orders", k)
    nonces = {r.json()["nonce"] for r in [*first.values(), anonymous]}
    assert len(nonces) == len(sent) + 1
    for tenant, response in first.items():
        assert response.status_code == 201, (tenant, response.text)
        assert "idempotent-replayed" not in response.headers
        again = post(client, "/orders", k, x_tenant=tenant)
        assert again.headers["idempotent-replayed"] == "true"
        assert again.content == response.content
        assert served.rec.count(f"{tenant}/{k}") == 1


def test_the_flask_view_decorator_tells_paths_apart() -> None:
    app = flask.Flask(__name__)
    guard = Guard(MemoryStore())

    @app.post("/pay/<path:rest>")
    @idempotent(guard)
    def pay(rest: str) -> dict[str, str]:
        return {"rest": rest, "nonce": uuid.uuid4().hex}

    with waitress_server(app) as url, httpx.Client(base_url=url, timeout=30.0) as c:
        assert_paths_are_told_apart(c, "/pay")


# -- Django, through its test client -----------------------------------------------------------
@pytest.fixture
def django_project() -> None:
    # As in test_http_django: the settings are read once; the variable does not outlive this.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_SETTINGS_MODULE", "tests.http.djangoproject.settings")
        django.setup()


def django_post(target: str, idem: str, **headers: str) -> Any:
    """POST ``target`` (percent-encoded) as a server would pass it on, REQUEST_URI included."""
    from django.test import Client

    extra = {f"HTTP_{name.upper()}": value for name, value in headers.items()}
    client: Any = Client()
    return client.generic(
        "POST",
        target,
        b"{}",
        "application/json",
        REQUEST_URI=target,
        HTTP_IDEMPOTENCY_KEY=idem,
        **extra,
    )


@pytest.mark.usefixtures("django_project")
def test_django_tells_an_undecodable_byte_from_its_percent_spelling() -> None:
    # Django's own path for the byte 0xFF is "%FF", as for a literal "%FF" (sent as %25FF).
    k = key()
    assert django_post("/pay/%FF", k).status_code == 404
    for same in ("/pay/%FF", "http://testserver/pay/%FF"):
        assert django_post(same, k)["Idempotent-Replayed"] == "true", same
    for other in ("/pay/%FE", "/pay/%25FF", "http://testserver/pay/%25FF"):
        assert django_post(other, k).status_code == 422, other


@pytest.mark.usefixtures("django_project")
def test_django_principals_get_scopes_of_their_own() -> None:
    from django.test import override_settings

    config = {"guard": "tests.http.djangoproject.views.guard", "principal": principal_from_json}
    with override_settings(MIDENG_HTTP=config):
        k = key()
        answers = [
            json.loads(django_post("/orders", k, x_tenant=json.dumps(who)).content)
            for who in PRINCIPALS[:-1]
        ]
        assert len({a["nonce"] for a in answers}) == len(answers)
