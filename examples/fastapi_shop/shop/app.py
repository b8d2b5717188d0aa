"""The web process: ``uvicorn shop.app:app``.

POST /orders and POST /pay/notify are guarded by the Idempotency-Key header (mideng.http):
a copy gets the first answer, replayed, without running. GET /metrics is Prometheus'."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, FastAPI, Header, HTTPException, Request
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel
from sqlalchemy import select

from mideng.http.fastapi import idempotent_route
from mideng.observability import metrics
from shop.payments import BadNotice, Notice, record_payment
from shop.tables import ledger, orders, stock
from shop.wiring import engine, guard

metrics.enable()


def customer_of(request: Request) -> str | None:
    """Keys are per customer: another customer's same key is another request."""
    return request.headers.get("x-customer")


# Every POST here needs the header; the callback's is the platform's trade number.
guarded = APIRouter(route_class=idempotent_route(guard, required=True, principal=customer_of))
app = FastAPI(title="fastapi_shop")


class NewOrder(BaseModel):
    sku: str
    quantity: int
    phone: str


class PayNotice(BaseModel):
    trade_no: str
    order: str
    amount: int


@guarded.post("/orders", status_code=201)
def create_order(body: NewOrder, x_customer: str = Header()) -> dict[str, Any]:
    with engine.begin() as conn:
        price = conn.execute(select(stock.c.price).where(stock.c.sku == body.sku)).scalar()
        if price is None:
            raise HTTPException(404, f"no product {body.sku}")
        number = uuid.uuid4().hex[:12].upper()
        row = {
            "number": number,
            "customer": x_customer,
            "phone": body.phone,
            "sku": body.sku,
            "quantity": body.quantity,
            "amount": price * body.quantity,
        }
        conn.execute(orders.insert().values(**row))
        conn.execute(ledger.insert().values(event="order_created", order_number=number))
    return {**row, "status": "UNPAID"}


@guarded.post("/pay/notify", response_class=PlainTextResponse)
def pay_notify(body: PayNotice) -> str:
    """The platform re-sends until it reads ``success``, with its trade number as the key."""
    try:
        with engine.begin() as conn:
            record_payment(conn, Notice(body.trade_no, body.order, body.amount))
    except BadNotice as exc:
        raise HTTPException(400, f"fail: {exc}") from exc
    return "success"


@app.get("/orders/{number}")
def get_order(number: str) -> dict[str, Any]:
    with engine.connect() as conn:
        row = conn.execute(select(orders).where(orders.c.number == number)).mappings().first()
    if row is None:
        raise HTTPException(404, f"no order {number}")
    return {k: row[k] for k in ("number", "sku", "quantity", "amount", "status", "notified")}


@app.get("/metrics")
def prometheus() -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


app.include_router(guarded)
