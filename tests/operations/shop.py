"""A service module as the CLI imports it (``--guard tests.operations.shop:guard``): its Guard,
on the store named by MIDENG_TEST_SHOP_STORE, and one operation registered on it."""

from __future__ import annotations

import os

from mideng import Guard

guard = Guard(os.environ["MIDENG_TEST_SHOP_STORE"], lease=0.2)
sent: list[str] = []


@guard.step("send_sms")
def send_sms(order: str) -> str:
    sent.append(order)
    if os.environ.get("MIDENG_TEST_SHOP_DOWN"):
        raise RuntimeError("sms gateway down")
    return f"sms:{order}"


@guard.operation("notify", key="{order}", steps=("send_sms",))
def notify(order: str) -> str:
    return send_sms(order)
