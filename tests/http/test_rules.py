"""Each Idempotency-Key rule, over a real socket, for the ASGI (FastAPI under uvicorn) and the
WSGI (Flask under waitress) middleware alike."""

from __future__ import annotations

import concurrent.futures
import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.http.http_serve import FRAMEWORKS, Served, serve

PROBLEM = "application/problem+json"


@pytest.fixture(scope="module", params=FRAMEWORKS)
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    with serve(request.param) as running:
        yield running


@pytest.fixture
def client(served: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.url, timeout=30.0) as c:
        yield c


def new_key() -> str:
    return uuid.uuid4().hex


def quoted(key: str) -> str:
    return f'"{key}"'


def post(
    client: httpx.Client, path: str, key: str | None, body: Any = None, **headers: str
) -> httpx.Response:
    sent = {k.replace("_", "-"): v for k, v in headers.items()}
    if key is not None:
        sent["idempotency-key"] = key
    if isinstance(body, bytes):
        return client.post(path, content=body, headers=sent)
    return client.post(path, json=body, headers=sent)


def assert_problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM
    doc: dict[str, Any] = response.json()
    assert doc["type"] == f"urn:mideng:problem:{slug}"
    assert doc["status"] == status
    assert doc["title"]
    assert doc["detail"]
    return doc


# -- first call and replay ------------------------------------------------------------------
def test_replay_returns_the_stored_status_headers_and_body(
    served: Served, client: httpx.Client
) -> None:
    key = new_key()
    first = post(client, "/orders", quoted(key), {"item": "book", "qty": 2})
    again = post(client, "/orders", quoted(key), {"item": "book", "qty": 2})
    assert first.status_code == again.status_code == 201
    assert again.content == first.content
    assert again.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    assert again.headers["content-type"] == first.headers["content-type"]
    assert again.headers["x-custom"] == first.headers["x-custom"] == "kept"
    assert served.rec.count(f"-/{quoted(key)}") == 1


def test_replay_drops_cookies_and_per_connection_headers(client: httpx.Client) -> None:
    key = quoted(new_key())
    first = post(client, "/orders", key, {})
    again = post(client, "/orders", key, {})
    assert "set-cookie" in first.headers  # the first caller gets the app's own response
    assert "set-cookie" not in again.headers
    assert again.headers.get("transfer-encoding") is None
    assert again.headers["content-length"] == str(len(again.content))


def test_retention_window_is_advertised(served: Served, client: httpx.Client) -> None:
    key = quoted(new_key())
    first = post(client, "/orders", key, {})
    again = post(client, "/orders", key, {})
    ttl = str(int(served.guard.policy("http").ttl or 0))
    assert first.headers["idempotency-retention"] == ttl
    assert again.headers["idempotency-retention"] == ttl


def test_json_body_is_canonicalised(served: Served, client: httpx.Client) -> None:
    key = quoted(new_key())
    first = post(client, "/orders", key, b'{"a": 1, "b": [1, 2]}', content_type="application/json")
    again = post(client, "/orders", key, b'{"b":[1,2],"a":1}', content_type="application/json")
    assert again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    assert served.rec.count(f"-/{key}") == 1


def test_non_json_body_is_compared_byte_for_byte(client: httpx.Client) -> None:
    key = quoted(new_key())
    post(client, "/orders", key, b"a=1&b=2", content_type="application/x-www-form-urlencoded")
    again = post(
        client, "/orders", key, b"b=2&a=1", content_type="application/x-www-form-urlencoded"
    )
    assert_problem(again, 422, "key-reused")


# -- the draft's error cases -----------------------------------------------------------------
def test_same_key_different_payload_is_422(served: Served, client: httpx.Client) -> None:
    key = quoted(new_key())
    assert post(client, "/orders", key, {"qty": 1}).status_code == 201
    doc = assert_problem(post(client, "/orders", key, {"qty": 2}), 422, "key-reused")
    assert doc["request_id"]
    assert served.rec.count(f"-/{key}") == 1


def test_same_key_on_another_path_or_method_is_422(client: httpx.Client) -> None:
    key = quoted(new_key())
    assert client.patch("/any", headers={"idempotency-key": key}).status_code == 200
    assert_problem(client.post("/any", headers={"idempotency-key": key}), 422, "key-reused")
    assert_problem(post(client, "/orders", key, None), 422, "key-reused")


def test_chosen_header_is_part_of_the_fingerprint(client: httpx.Client) -> None:
    key = quoted(new_key())
    assert post(client, "/orders", key, {}, x_variant="a").status_code == 201
    assert post(client, "/orders", key, {}, x_variant="a").headers["idempotent-replayed"]
    assert_problem(post(client, "/orders", key, {}, x_variant="b"), 422, "key-reused")


def test_missing_key_on_a_route_that_requires_it_is_400(
    served: Served, client: httpx.Client
) -> None:
    doc = assert_problem(client.put("/any"), 400, "key-missing")
    assert "Idempotency-Key" in doc["detail"]
    assert served.rec.count("-/None") == 0


def test_missing_key_where_optional_runs_unguarded(served: Served, client: httpx.Client) -> None:
    before = served.rec.count("-/None")
    assert post(client, "/orders", None, {}).status_code == 201
    assert post(client, "/orders", None, {}).status_code == 201
    assert served.rec.count("-/None") == before + 2


@pytest.mark.parametrize(
    "value",
    [
        '"unterminated',
        '"a", "b"',
        '"tab\there"',
        '""',
        "?1",
        '"' + "k" * 256 + '"',
        "a b",
        '"x";',
        '"x";A=1',
    ],
)
def test_malformed_key_is_400(served: Served, client: httpx.Client, value: str) -> None:
    assert_problem(post(client, "/orders", value, {}), 400, "key-malformed")
    assert served.rec.count(f"-/{value}") == 0


@pytest.mark.parametrize("value", ["8e03978e-40d5-43e8-bc93-6894a57f9324", "tok:en/1", "12345"])
def test_bare_key_is_accepted_leniently(served: Served, client: httpx.Client, value: str) -> None:
    key = value.replace("8e03978e", new_key()[:8]).replace("12345", str(uuid.uuid4().int)[:15])
    first = post(client, "/orders", key, {})
    assert first.status_code == 201
    assert post(client, "/orders", key, {}).headers["idempotent-replayed"] == "true"
    # The bare spelling and the quoted one name the same key.
    assert post(client, "/orders", quoted(key), {}).content == first.content


def test_key_parameters_are_ignored(client: httpx.Client) -> None:
    key = new_key()
    first = post(client, "/orders", f'"{key}";v=1', {})
    assert post(client, "/orders", quoted(key), {}).content == first.content


def test_in_flight_key_is_409_with_retry_after(served: Served, client: httpx.Client) -> None:
    key = quoted(new_key())
    label = f"-/{key}"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(post, client, "/slow", key, {})
        served.rec.wait_started(label)
        busy = post(client, "/slow", key, {})
        served.rec.release(label)
        done = first.result(timeout=30)
    assert_problem(busy, 409, "key-in-use")
    assert int(busy.headers["retry-after"]) >= 1
    assert done.status_code == 200
    assert post(client, "/slow", key, {}).content == done.content
    assert served.rec.count(label) == 1


@pytest.mark.parametrize("code", [500, 502, 503])
def test_5xx_releases_the_key(served: Served, client: httpx.Client, code: int) -> None:
    key = quoted(new_key())
    first = post(client, f"/status/{code}", key, {})
    second = post(client, f"/status/{code}", key, {})
    assert first.status_code == second.status_code == code
    assert "idempotent-replayed" not in second.headers
    assert first.json()["nonce"] != second.json()["nonce"]
    assert served.rec.count(f"-/{key}") == 2


@pytest.mark.parametrize("code", [200, 400, 404, 409])
def test_final_answers_are_stored(served: Served, client: httpx.Client, code: int) -> None:
    key = quoted(new_key())
    first = post(client, f"/status/{code}", key, {})
    again = post(client, f"/status/{code}", key, {})
    assert again.status_code == code
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content
    assert served.rec.count(f"-/{key}") == 1


def test_try_again_later_statuses_are_not_stored(served: Served, client: httpx.Client) -> None:
    key = quoted(new_key())
    post(client, "/status/429", key, {})
    assert post(client, "/status/429", key, {}).json()["run"] == 2


def test_principals_never_share_a_stored_response(served: Served, client: httpx.Client) -> None:
    key = quoted(new_key())
    acme = post(client, "/orders", key, {"x": 1}, x_tenant="acme")
    umbrella = post(client, "/orders", key, {"x": 1}, x_tenant="umbrella")
    assert acme.status_code == umbrella.status_code == 201
    assert "idempotent-replayed" not in umbrella.headers
    assert acme.json()["nonce"] != umbrella.json()["nonce"]
    assert served.rec.count(f"acme/{key}") == served.rec.count(f"umbrella/{key}") == 1
    # ... and each still replays its own.
    assert post(client, "/orders", key, {"x": 1}, x_tenant="acme").content == acme.content
    # A different payload under another tenant is that tenant's own first call, not a 422.
    assert post(client, "/orders", key, {"x": 2}, x_tenant="initech").status_code == 201


def test_oversized_body_is_413_and_nothing_is_stored(served: Served, client: httpx.Client) -> None:
    key = quoted(new_key())
    assert_problem(post(client, "/orders", key, b"x" * 2048), 413, "body-too-large")
    assert served.guard.get("http:-", key.strip('"')) is None
    assert served.rec.count(f"-/{key}") == 0
    # The same key stays usable for a request of allowed size.
    assert post(client, "/orders", key, {}).status_code == 201


def test_oversized_chunked_body_is_413(served: Served, client: httpx.Client) -> None:
    key = quoted(new_key())

    def body() -> Iterator[bytes]:
        for _ in range(8):
            yield b"y" * 512

    response = client.post("/orders", content=body(), headers={"idempotency-key": key})
    assert_problem(response, 413, "body-too-large")
    assert served.rec.count(f"-/{key}") == 0


def test_store_down_is_503_and_the_handler_does_not_run(
    served: Served, client: httpx.Client
) -> None:
    key = quoted(new_key())
    served.store.down = True
    try:
        response = post(client, "/orders", key, {})
    finally:
        served.store.down = False
    assert_problem(response, 503, "store-unavailable")
    assert response.headers["retry-after"] == "1"
    assert served.rec.count(f"-/{key}") == 0
    assert post(client, "/orders", key, {}).status_code == 201


# -- methods and streaming -------------------------------------------------------------------
def test_unguarded_methods_pass_through(served: Served, client: httpx.Client) -> None:
    key = quoted(new_key())
    for _ in range(2):
        assert client.get("/orders", headers={"idempotency-key": key}).status_code == 405
    # A route configured for PUT guards it.
    first = client.put("/any", headers={"idempotency-key": key})
    assert client.put("/any", headers={"idempotency-key": key}).content == first.content
    assert served.rec.count(f"-/{key}") == 1


def test_streamed_response_is_captured_whole(served: Served, client: httpx.Client) -> None:
    key = quoted(new_key())
    first = post(client, "/stream", key, {})
    again = post(client, "/stream", key, {})
    assert first.content == again.content == b"A" * 100 + b"B" * 100 + b"C" * 100
    assert again.headers["idempotent-replayed"] == "true"
    assert served.rec.count(f"-/{key}") == 1


@pytest.mark.parametrize(("path", "size"), [("/big", 10_000), ("/events", 18)])
def test_uncapturable_response_passes_through_and_releases(
    served: Served, client: httpx.Client, path: str, size: int
) -> None:
    key = quoted(new_key())
    first = post(client, path, key, {})
    again = post(client, path, key, {})
    assert len(first.content) == len(again.content) == size
    assert "idempotent-replayed" not in again.headers
    assert served.rec.count(f"-/{key}") == 2
    assert served.guard.get("http:-", key.strip('"')) is None


def test_request_id_is_echoed_and_replaced_when_malformed(client: httpx.Client) -> None:
    good = client.post("/orders", json={}, headers={"x-request-id": "req-123"})
    assert good.headers["x-request-id"] == "req-123"
    assert good.json()["request_id"] == "req-123"
    bad = client.post("/orders", json={}, headers={"x-request-id": "has space"})
    assert bad.headers["x-request-id"] != "has space"
    assert bad.json()["request_id"] == bad.headers["x-request-id"]


def test_problem_documents_are_json(client: httpx.Client) -> None:
    response = client.put("/any", headers={"x-request-id": "rid-1"})
    doc = json.loads(response.content)
    assert doc["request_id"] == "rid-1"
    assert response.headers["cache-control"] == "no-store"
