"""A hybrid store's resolve that can't reach Redis warns that the old copy keeps replaying,
as forget does, even while the outage's own warning is held back (``warn_every``)."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from mideng.core.failure import encode_failure
from mideng.core.record import ClaimRequest, Resolution, Status, Ticket
from mideng.stores.hybrid import HybridStore
from mideng.stores.redis import RedisStore
from mideng.stores.sqlite import SQLiteStore


def kept_failure(store: SQLiteStore, key: str) -> None:
    """A task out of attempts: FAILED with its error kept (an operator resolves it)."""
    claim = store.claim(ClaimRequest("pay", key, uuid.uuid4().hex, 30, 60, None))
    store.fail(Ticket.of(claim.record), encode_failure(RuntimeError("declined")), 60)


@pytest.mark.parametrize("failed", [True, False])
def test_resolve_warns_that_the_copy_it_could_not_touch_keeps_replaying(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, failed: bool
) -> None:
    durable = SQLiteStore(str(tmp_path / "durable.db"))
    down = RedisStore.from_url("redis://127.0.0.1:1/0", prefix=f"down-{uuid.uuid4().hex[:8]}")
    store = HybridStore(fast=down, durable=durable, warn_every=3600)
    try:
        kept_failure(durable, "k1")
        # The outage is noticed (and warned about) once, by another call.
        store.claim(ClaimRequest("pay", "other", uuid.uuid4().hex, 30, 60, None))
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="mideng"):
            settled = store.resolve(
                "pay",
                "k1",
                Resolution(
                    None if failed else b'{"ok": true}', None if failed else "json", failed, 60
                ),
            )
        assert settled.status is (Status.FAILED if failed else Status.SUCCEEDED)
        kept = [
            r for r in caplog.records if getattr(r, "mideng_outcome", None) == "redis_copy_kept"
        ]
        assert len(kept) == 1, [r.getMessage() for r in caplog.records]
        assert "pay:k1" in kept[0].getMessage()
    finally:
        store.close()
