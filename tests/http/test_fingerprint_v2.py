"""Version-2 fingerprints (one digest) tell requests apart exactly as version 1 did, and a record
stored with version 1 (by the code before version 2) answers the same request as it always did:
a replay, a 409 while in progress, a 422 for a different request."""

from __future__ import annotations

import threading
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mideng import Guard
from mideng.http import asgi
from mideng.http.core import HttpOptions, Incoming
from mideng.http.headers import Headers
from mideng.http.identity import V2, http_digest, http_fingerprint
from mideng.stores.memory import MemoryStore
from mideng.stores.redis.store import RedisStore
from tests.services import REDIS_URL, need

texts = st.sampled_from(["POST", "post", "/a", "/caf\xe9", "", "a=1", "\udcff", "\n"])
raws = st.sampled_from([None, b"/a", b"/caf\xc3\xa9", b"/caf\xff"])
types = st.sampled_from(["application/json", "a/b+json", "text/plain", None])
bodies = st.sampled_from(
    [b"", b"{}", b'{"a":1,"b":2}', b'{"b": 2, "a": 1}', b'{"a":1}\n', b"[1]", b"x", b'{"a":\n']
)
headers = st.sampled_from(["{}", '{"x-a":"1"}', '{"x-a":"1\\n"}', '{"x-a":null}'])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(texts, texts, texts, raws, types, bodies, headers), max_size=12))
def test_version_2_matches_exactly_where_version_1_does(requests: list[Any]) -> None:
    pairs = {(http_fingerprint(*r), http_digest(*r)) for r in requests}
    assert len({v1 for v1, _ in pairs}) == len(pairs) == len({v2 for _, v2 in pairs})
    assert all(v2.startswith(V2) and not v1.startswith(V2) for v1, v2 in pairs)


def test_the_options_digest_is_version_2_of_the_request() -> None:
    opts = HttpOptions(guard=Guard(MemoryStore()), fingerprint_headers=("x-a",))
    request = Incoming("post", "/a", "q=1", Headers([("Content-Type", "application/json")]))
    body = b'{"b": 2, "a": 1}'
    assert opts.digest(request, body) == http_digest(
        "POST", "/a", "q=1", None, "application/json", body, '{"x-a":null}'
    )


def counting_app(
    runs: list[int], hold: threading.Event | None = None, started: anyio.Event | None = None
) -> asgi.ASGIApp:
    async def app(scope: asgi.Scope, receive: asgi.Receive, send: asgi.Send) -> None:
        runs.append(1)
        if started is not None:
            started.set()
        if hold is not None:
            await anyio.to_thread.run_sync(hold.wait, 30)
        start = {"type": "http.response.start", "status": 201, "headers": []}
        await send(start)
        await send({"type": "http.response.body", "body": b"run %d" % len(runs)})

    return app


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["memory", "redis"])
async def guard(request: pytest.FixtureRequest) -> AsyncIterator[Guard]:
    if request.param == "memory":
        yield Guard(MemoryStore())
        return
    need("redis")
    store = RedisStore.from_url(REDIS_URL, prefix=f"mideng-test-v2-{uuid.uuid4().hex[:8]}")
    try:
        yield Guard(store)
    finally:
        await store.aclose()
        store.close()


class AsVersion1:
    """While entered, requests are fingerprinted as the code before version 2 did."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch

    def __enter__(self) -> None:
        self.monkeypatch.setattr(HttpOptions, "digest", HttpOptions.fingerprint)

    def __exit__(self, *exc: object) -> None:
        self.monkeypatch.undo()


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")


@pytest.mark.anyio
async def test_a_version_1_record_replays_and_refuses_as_before(
    guard: Guard, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_version_1 = AsVersion1(monkeypatch)
    runs: list[int] = []
    app = asgi.IdempotencyMiddleware(counting_app(runs), guard=guard)
    key = {"idempotency-key": f'"v1-{id(guard)}"'}
    async with client(app) as c:
        with as_version_1:
            first = await c.post("/o", json={"a": 1, "b": 2}, headers=key)
        record = guard.get("http:-", f"v1-{id(guard)}")
        assert record is not None
        assert record.fingerprint is not None
        assert not record.fingerprint.startswith(V2)
        # The same request after the upgrade: the stored response, the body not run again.
        again = await c.post("/o", content=b'{"b": 2, "a": 1}', headers={**key, **JSON})
        other = await c.post("/o", json={"a": 2}, headers=key)
    assert (first.status_code, first.content) == (201, b"run 1")
    assert (again.status_code, again.content) == (201, b"run 1")
    assert again.headers["idempotent-replayed"] == "true"
    assert other.status_code == 422
    assert runs == [1]


JSON = {"content-type": "application/json"}


@pytest.mark.anyio
async def test_a_version_1_record_in_progress_answers_409(
    guard: Guard, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_version_1 = AsVersion1(monkeypatch)
    runs: list[int] = []
    hold, started = threading.Event(), anyio.Event()
    app = asgi.IdempotencyMiddleware(counting_app(runs, hold, started), guard=guard)
    key = {"idempotency-key": f'"v1-busy-{id(guard)}"'}
    async with client(app) as c, anyio.create_task_group() as tg:
        first: list[httpx.Response] = []

        async def first_call() -> None:
            first.append(await c.post("/o", json={"a": 1}, headers=key))

        with as_version_1:
            tg.start_soon(first_call)
            with anyio.fail_after(10):
                await started.wait()
        busy = await c.post("/o", json={"a": 1}, headers=key)
        hold.set()
    assert busy.status_code == 409
    assert first[0].status_code == 201
    assert runs == [1]


@pytest.mark.anyio
async def test_new_records_carry_version_2(guard: Guard) -> None:
    app = asgi.IdempotencyMiddleware(counting_app([]), guard=guard)
    async with client(app) as c:
        await c.post("/o", json={"a": 1}, headers={"idempotency-key": f'"v2-{id(guard)}"'})
    record = guard.get("http:-", f"v2-{id(guard)}")
    assert record is not None
    assert record.fingerprint is not None
    assert record.fingerprint.startswith(V2)


def test_a_kept_head_digests_as_one_made_afresh() -> None:
    # The head's hash state is kept per endpoint and copied: the digest must be the spelled
    # head's and the body's, whether the head was kept, made afresh, or made by threads at once.
    import hashlib

    from mideng.http import identity

    body = b'{"b": 2, "a": 1}'
    head = b'{"body":"json","headers":{},"method":"POST","path":"/a","query":"q=1"}\n'
    expected = V2 + hashlib.sha256(head + b'{"a":1,"b":2}').hexdigest()
    args = ("POST", "/a", "q=1", b"/a", "application/json", body, "{}")
    identity._HEADS.clear()
    assert http_digest(*args) == expected  # made
    assert http_digest(*args) == expected  # kept
    assert http_digest("POST", "/b", *args[2:]) != expected
    seen: list[str] = []
    barrier = threading.Barrier(8)

    def digests() -> None:
        barrier.wait()
        seen.extend(http_digest(*args) for _ in range(500))

    threads = [threading.Thread(target=digests) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == [expected] * 4000
    # Paths that carry ids never repeat: what is kept stays bounded.
    for n in range(identity._HEADS_KEPT + 10):
        http_digest("POST", f"/orders/{n}", "", None, "application/json", body, "{}")
    assert 0 < len(identity._HEADS) <= identity._HEADS_KEPT
    assert http_digest(*args) == expected
