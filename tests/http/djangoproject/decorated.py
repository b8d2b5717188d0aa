"""Views guarded one by one with @idempotent_view: a function (sync and async), a class-based
view's method, a DRF APIView's method and a DRF ViewSet action. Each counts its runs per
(view, user, Idempotency-Key) here, and, where settings name ``RUNS_DIR``, one line a run in
that folder's file for the view (the live server's workers are separate processes)."""

from __future__ import annotations

import asyncio
import collections
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.response import TemplateResponse
from django.utils.decorators import method_decorator
from django.views import View
from rest_framework.decorators import action  # type: ignore[import-untyped]
from rest_framework.response import Response  # type: ignore[import-untyped]
from rest_framework.views import APIView  # type: ignore[import-untyped]
from rest_framework.viewsets import ViewSet  # type: ignore[import-untyped]

from mideng.http.django import idempotent_view

runs: collections.Counter[str] = collections.Counter()
_lock = threading.Lock()


def ran(view: str, request: Any) -> int:
    user = getattr(request.user, "pk", None) or "-"
    label = f"{view}/{user}/{request.headers.get('idempotency-key')}"
    folder = getattr(settings, "RUNS_DIR", None)
    if folder:
        with (Path(folder) / view).open("a") as runs_file:
            runs_file.write(label + "\n")
    with _lock:
        runs[label] += 1
        return runs[label]


def answer(view: str, request: Any, body: Any) -> dict[str, Any]:
    time.sleep(getattr(settings, "VIEW_DELAY", 0))
    return {"view": view, "run": ran(view, request), "body": body, "nonce": uuid.uuid4().hex}


def posted(request: HttpRequest) -> Any:
    return json.loads(request.body or b"null")


@idempotent_view
def fbv(request: HttpRequest) -> HttpResponse:
    return JsonResponse(answer("fbv", request, posted(request)), status=201)


@idempotent_view
async def afbv(request: HttpRequest) -> HttpResponse:
    await asyncio.sleep(getattr(settings, "VIEW_DELAY", 0))
    return JsonResponse(answer("afbv", request, posted(request)), status=201)


@idempotent_view
def templated(request: HttpRequest) -> TemplateResponse:
    return TemplateResponse(request, "order.txt", answer("templated", request, None), status=201)


class Orders(View):
    """A class-based view: its method decorated where it is written."""

    @method_decorator(idempotent_view(required=True))
    def post(self, request: HttpRequest) -> HttpResponse:
        return JsonResponse(answer("cbv", request, posted(request)), status=201)

    def get(self, request: HttpRequest) -> HttpResponse:
        return JsonResponse({"orders": []})


@method_decorator(idempotent_view(methods=("POST", "PUT")), name="put")
class Order(View):
    """A class-based view decorated on the class: its ``put`` guarded, with PUT among the
    methods."""

    def put(self, request: HttpRequest, number: int) -> HttpResponse:
        return JsonResponse(answer("cbv-put", request, [number, posted(request)]))


class ApiOrders(APIView):  # type: ignore[misc]
    @method_decorator(idempotent_view)
    def post(self, request: Any) -> Response:
        return Response(answer("apiview", request, request.data), status=201)


class OrderActions(ViewSet):  # type: ignore[misc]
    @action(detail=False, methods=["post"])  # type: ignore[untyped-decorator]
    @method_decorator(idempotent_view)
    def place(self, request: Any) -> Response:
        return Response(answer("viewset", request, request.data), status=201)
