"""mideng.outbox: send after commit.

``Outbox(engine).add(conn, destination, payload, key=...)`` writes a message into the
caller's transaction; ``Relay(db, broker)`` (or ``mideng relay``) publishes only what
committed, in commit order per key, with the row id as the message id end to end.
"""

from mideng.outbox.ops import Left
from mideng.outbox.pipeline import Batch
from mideng.outbox.publishing import Backoff
from mideng.outbox.relay import Relay
from mideng.outbox.schema import DEFAULT_TABLE, script
from mideng.outbox.writer import Outbox, encode_payload

__all__ = [
    "DEFAULT_TABLE",
    "Backoff",
    "Batch",
    "Left",
    "Outbox",
    "Relay",
    "encode_payload",
    "script",
]
