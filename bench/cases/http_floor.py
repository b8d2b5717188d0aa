"""The http case's floors for the ASGI rows: what the least an idempotency layer can be costs
in the same run, and what reaching a layer in FastAPI's stack costs.

- "a hand-written minimal layer": the Idempotency-Key header looked up in a dict, the body read
  in one message, one SHA-256 over method, path and body as they arrived, the response held
  back and stored as JSON (status, headers, base64 body), a replay decoded from it. No lease,
  no fencing, no request id, no key rules, no semantic JSON fingerprint, no limits, no shared
  store: the floor of the job, not a contender (it is not safe across processes or crashes).
- "a layer that answers at once": installed where the middleware is (``add_middleware``), it
  sends a fixed 201 without calling the endpoint: FastAPI's own layers around the middleware
  and this benchmark's request, which every replay pays before the middleware runs.
- "a lean layer of mideng's parts" (bench/cases/http_lean.py): the parts mideng's middleware
  calls on a first request, called in one coroutine with no structure around them (first
  requests only): what the guarantees' parts cost, apart from how the middleware is built.
- "a raw ASGI application": the endpoint's answer sent by a bare ASGI function, with mideng's
  middleware (memory store) and the minimal layer around it: each layer's own cost, apart from
  FastAPI's (whose code running between the layer's parts slows them on a small CPU cache).
"""

from __future__ import annotations

import binascii
import hashlib
import json
from typing import Any

from bench.cases.http_lean import LeanLayer
from bench.timing import Batch
from bench.web import ANSWER, endpoint_app, middleware_cases, requests
from mideng import Guard
from mideng.http.asgi import IdempotencyMiddleware
from mideng.stores.memory import MemoryStore


class MinimalIdempotency:
    def __init__(self, app: Any) -> None:
        self.app = app
        self.records: dict[bytes, tuple[str, bytes | None]] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        key = dict(scope["headers"]).get(b"idempotency-key") if scope["type"] == "http" else None
        if key is None:
            await self.app(scope, receive, send)
            return
        body = (await receive()).get("body", b"")
        digest = hashlib.sha256(b"%s %s\n%s" % (scope["method"].encode(), scope["raw_path"], body))
        fingerprint = digest.hexdigest()
        found = self.records.get(key)
        if found is not None:
            stored = found[1]
            status = 409 if stored is None or found[0] != fingerprint else 0
            if status:
                await send({"type": "http.response.start", "status": status, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
            assert stored is not None
            form = json.loads(stored)
            headers = [(n.encode("latin-1"), v.encode("latin-1")) for n, v in form["headers"]]
            head = {"type": "http.response.start", "status": form["status"], "headers": headers}
            await send(head)
            await send({"type": "http.response.body", "body": binascii.a2b_base64(form["body"])})
            return
        self.records[key] = (fingerprint, None)
        given = False
        start: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def replayed() -> dict[str, Any]:
            nonlocal given
            if given:
                return await receive()  # type: ignore[no-any-return]
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def held(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
            else:
                chunks.append(message.get("body", b""))

        try:
            await self.app(scope, replayed, held)
        except BaseException:
            del self.records[key]
            raise
        answer = b"".join(chunks)
        headers = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in start.get("headers", ())]
        spelt = binascii.b2a_base64(answer, newline=False).decode("ascii")
        form = {"status": start["status"], "headers": headers, "body": spelt}
        self.records[key] = (fingerprint, json.dumps(form).encode())
        await send(start)
        await send({"type": "http.response.body", "body": answer, "more_body": False})


class AnswersAtOnce:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 201, "headers": headers})
        await send({"type": "http.response.body", "body": ANSWER, "more_body": False})


async def raw_app(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(ANSWER))]
    await send({"type": "http.response.start", "status": 201, "headers": headers})
    await send({"type": "http.response.body", "body": ANSWER, "more_body": False})


def floor_cases() -> list[tuple[str, Batch]]:
    minimal = endpoint_app()
    minimal.add_middleware(MinimalIdempotency)
    answering = endpoint_app()
    answering.add_middleware(AnswersAtOnce)
    around = IdempotencyMiddleware(raw_app, guard=Guard(MemoryStore()))
    lean = endpoint_app()
    lean.add_middleware(LeanLayer)
    return [
        *middleware_cases(minimal, "a hand-written minimal layer"),
        middleware_cases(lean, "a lean layer of mideng's parts")[0],
        ("a layer that answers at once", requests(answering, lambda n: None)),
        ("a raw ASGI application", requests(raw_app, lambda n: None)),
        *middleware_cases(around, "mideng + memory store around it"),
        *middleware_cases(MinimalIdempotency(raw_app), "the minimal layer around it"),
        middleware_cases(LeanLayer(raw_app), "the lean layer around it")[0],
    ]


def floor_lines(m: dict[str, float]) -> list[str]:
    """mideng's memory rows against the floors of the same run."""
    first, replay = m["mideng + memory store, first request"], m["mideng + memory store, replay"]
    low_first = m["a hand-written minimal layer, first request"]
    low_replay = m["a hand-written minimal layer, replay"]
    reach = m["a layer that answers at once"]
    bare = m["bare endpoint"]
    lean = m["a lean layer of mideng's parts, first request"]
    return [
        "",
        f"Over the bare endpoint, first requests: mideng adds {first - bare:.1f} µs, the "
        f"hand-written minimal layer {low_first - bare:.1f} µs ({first / low_first:.2f}x its "
        f"time), the lean layer of mideng's parts {lean - bare:.1f} µs ({lean / bare:.2f}x the "
        f"bare endpoint). Replays, past the {reach:.1f} µs of reaching the layer: mideng "
        f"{replay - reach:.1f} µs, the minimal layer {low_replay - reach:.1f} µs.",
        "",
        own_lines(m),
    ]


def own_lines(m: dict[str, float]) -> str:
    """Each layer's own cost around the raw ASGI application."""
    raw = m["a raw ASGI application"]
    mw_first = m["mideng + memory store around it, first request"] - raw
    mw_replay = m["mideng + memory store around it, replay"] - raw
    low_first = m["the minimal layer around it, first request"] - raw
    low_replay = m["the minimal layer around it, replay"] - raw
    lean_first = m["the lean layer around it, first request"] - raw
    return (
        f"Around a raw ASGI application ({raw:.1f} µs), each layer's own cost: mideng "
        f"{mw_first:.1f} µs a first request, {mw_replay:.1f} µs a replay; the minimal layer "
        f"{low_first:.1f} µs and {low_replay:.1f} µs; the lean layer of mideng's parts "
        f"{lean_first:.1f} µs a first request."
    )
