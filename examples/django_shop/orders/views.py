"""The shop's HTTP API: create an order (guarded by its Idempotency-Key), read it back, the
payment platform's callback, and Prometheus' ``/metrics`` (mideng's counters among them)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from mideng.errors import PayloadMismatchError
from mideng.http.django import idempotent_view
from mideng.observability import metrics
from orders.models import Ledger, Order, Stock
from orders.payments import BadNotice, PaymentNotice, record_payment

# mideng's counters and histograms, into prometheus-client's default registry.
metrics.enable()


def _problem(status: int, detail: str) -> JsonResponse:
    return JsonResponse(
        {"status": status, "detail": detail}, status=status, content_type="application/problem+json"
    )


def _order_json(order: Order) -> dict[str, Any]:
    return {
        "number": order.number,
        "sku": order.sku,
        "quantity": order.quantity,
        "amount": order.amount,
        "status": order.status,
    }


def _wanted(body: bytes) -> tuple[str, int]:
    """The sku and quantity a create request asks for; ValueError says what is wrong."""
    try:
        wanted = json.loads(body)
    except ValueError as error:
        raise ValueError("the body must be JSON") from error
    if not isinstance(wanted, dict):
        raise ValueError('the body must be an object: {"sku": ..., "quantity": ...}')
    sku, quantity = wanted.get("sku"), wanted.get("quantity")
    if not isinstance(sku, str) or not sku:
        raise ValueError("sku must be a non-empty string")
    if type(quantity) is not int or quantity < 1:
        raise ValueError("quantity must be a positive whole number")
    return sku, quantity


# A client that timed out sends the same request again with the same Idempotency-Key: it gets
# the first response back (Idempotent-Replayed: true), and one order exists. csrf_exempt: an
# API called with a header, not a form.
@csrf_exempt
@idempotent_view(required=True)
@require_POST
def create_order(request: HttpRequest) -> HttpResponse:
    if not request.user.is_authenticated:
        return _problem(401, "name the customer in the X-Customer header")
    try:
        sku, quantity = _wanted(request.body)
    except ValueError as error:
        return _problem(400, str(error))
    stock = Stock.objects.filter(sku=sku).first()
    if stock is None:
        return _problem(400, f"no such sku: {sku}")
    try:
        with transaction.atomic():
            order = Order.objects.create(
                number=f"A{uuid.uuid4().hex[:12].upper()}",
                customer=request.user,
                sku=sku,
                quantity=quantity,
                amount=stock.price * quantity,
            )
            Ledger.objects.create(event=Ledger.Event.ORDER_CREATED, order_number=order.number)
    except IntegrityError:  # an order number drawn twice: the client sends again, anew
        return _problem(503, "try again")
    return JsonResponse(_order_json(order), status=201)


@require_GET
def order_detail(request: HttpRequest, number: str) -> HttpResponse:
    if not request.user.is_authenticated:
        return _problem(401, "name the customer in the X-Customer header")
    order = Order.objects.filter(number=number, customer=request.user.pk).first()
    if order is None:
        return _problem(404, f"no order {number}")
    return JsonResponse(_order_json(order))


# Called by the payment platform, form-encoded, until it reads "success".
@csrf_exempt
@require_POST
def pay_notify(request: HttpRequest) -> HttpResponse:
    try:
        record_payment(PaymentNotice.from_form(request.POST))
    except BadNotice as error:
        return HttpResponse(f"fail: {error}", status=400, content_type="text/plain")
    except PayloadMismatchError:
        return HttpResponse(
            "fail: this trade number was notified with other fields",
            status=422,
            content_type="text/plain",
        )
    return HttpResponse("success", content_type="text/plain")


@require_GET
def prometheus(request: HttpRequest) -> HttpResponse:
    return HttpResponse(generate_latest(), content_type=CONTENT_TYPE_LATEST)
