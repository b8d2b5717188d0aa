"""Stand-ins for the two remote services the notification calls: an SMS gateway and a coupon
service. Each keeps its own rows, committed on its own, as a provider's database would; a real
one also dedupes on the Idempotency-Key it is sent (these keep it, and do not dedupe, so that
the example's ledger shows each step ran once)."""

from __future__ import annotations

import uuid

from shop.tables import coupons_issued, sms_sent
from shop.wiring import engine


def send_sms(phone: str, text: str, *, idempotency_key: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            sms_sent.insert().values(phone=phone, text=text, idempotency_key=idempotency_key)
        )


def issue_coupon(customer: str, *, idempotency_key: str) -> str:
    code = "C-" + uuid.uuid4().hex[:10].upper()
    with engine.begin() as conn:
        conn.execute(
            coupons_issued.insert().values(
                code=code, customer=customer, idempotency_key=idempotency_key
            )
        )
    return code
