"""The header names mideng puts on every message it publishes and reads back when consuming.

One message id travels from an outbox row to the broker and to the consumer's dedup; the
business key and the request id ride along so a consumer can dedupe on the key the producer
chose and carry the producer's request id into its own logs and records.
"""

from __future__ import annotations

#: The publisher's own id for the message (an outbox row id): the same on every re-publish.
MESSAGE_ID = "message-id"
#: The business key the producer dedupes on (``order:123456``).
IDEMPOTENCY_KEY = "idempotency-key"
#: The request id current when the message was produced.
REQUEST_ID = "x-request-id"
