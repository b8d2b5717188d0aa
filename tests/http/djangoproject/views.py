"""Views of the test project; each counts its runs per (tenant, Idempotency-Key)."""

from __future__ import annotations

import collections
import json
import threading
import uuid

from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse

from mideng import Guard
from mideng.context import get_request_id
from mideng.http.core import Incoming
from mideng.http.debounce import Debouncer
from mideng.http.django import debounce, require_token, token_view
from mideng.stores.memory import MemoryStore
from mideng.tokens import TokenService

guard = Guard(MemoryStore())
tokens = TokenService(MemoryStore(), ttl=60)
debouncer = Debouncer(MemoryStore(), window=60)
runs: collections.Counter[str] = collections.Counter()
_lock = threading.Lock()


def tenant_of(request: Incoming) -> str | None:
    return request.headers.get("x-tenant")


def user_of(request: Incoming) -> str:
    return f"{request.headers.get('x-user') or 'anonymous'}:order_create"


def label(request: HttpRequest) -> str:
    return f"{request.headers.get('x-tenant') or '-'}/{request.headers.get('idempotency-key')}"


def ran(request: HttpRequest) -> int:
    with _lock:
        runs[label(request)] += 1
        return runs[label(request)]


def orders(request: HttpRequest) -> HttpResponse:
    run = ran(request)
    body = request.body.decode("utf-8", "replace")
    response = JsonResponse(
        {"run": run, "body": body, "nonce": uuid.uuid4().hex, "request_id": get_request_id()},
        status=201,
    )
    response.set_cookie("session", "first")
    response["X-Custom"] = "kept"
    return response


def status(request: HttpRequest, code: int) -> HttpResponse:
    return JsonResponse({"run": ran(request), "nonce": uuid.uuid4().hex}, status=code)


def stream(request: HttpRequest) -> StreamingHttpResponse:
    ran(request)
    return StreamingHttpResponse(iter([b"a" * 100, b"b" * 100]), content_type="text/plain")


def big(request: HttpRequest) -> StreamingHttpResponse:
    ran(request)
    return StreamingHttpResponse(iter([b"z" * 1000] * 10), content_type="text/plain")


def explode(request: HttpRequest) -> HttpResponse:
    ran(request)
    raise RuntimeError("view failed")


@require_token(tokens, user_of)
def submit(request: HttpRequest) -> HttpResponse:
    if request.headers.get("x-fail"):
        return HttpResponse(json.dumps({"ok": False}), status=503)
    return JsonResponse({"ok": True})


@debounce(debouncer, lambda r: r.headers.get("x-user"))
def create_once(request: HttpRequest) -> HttpResponse:
    return JsonResponse({"created": True}, status=201)


issue_token = token_view(tokens, user_of)
