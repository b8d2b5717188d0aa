"""Stand-ins for the two remote services the notification calls: an SMS gateway and a coupon
service. Each keeps its own records, one JSON line per call in a file of its own under
``settings.PROVIDERS_DIR`` (not the shop's database, as a provider's are not), appended under
an exclusive lock as a provider serialises its writes. A real one also dedupes on the
Idempotency-Key it is sent; these keep it and do not dedupe, so that their records show each
step ran once."""

from __future__ import annotations

import fcntl
import json
import uuid
from pathlib import Path
from typing import Any

from django.conf import settings

SMS, COUPONS = "sms.jsonl", "coupons.jsonl"


def records(name: str) -> Path:
    folder = Path(settings.PROVIDERS_DIR)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


def _append(name: str, record: dict[str, Any]) -> None:
    with records(name).open("a") as file:
        fcntl.flock(file, fcntl.LOCK_EX)  # released when the file closes
        file.write(json.dumps(record) + "\n")


def send_sms(to: str, text: str, *, idempotency_key: str) -> None:
    _append(SMS, {"to": to, "text": text, "idempotency_key": idempotency_key})


def issue_coupon(customer: str, *, idempotency_key: str) -> str:
    code = "C-" + uuid.uuid4().hex[:10].upper()
    _append(COUPONS, {"code": code, "customer": customer, "idempotency_key": idempotency_key})
    return code
