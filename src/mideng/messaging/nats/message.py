"""NATS JetStream's messages: a fetched message read as a ``Message``, and the headers of the
copy a dead letter leaves.

``Message.id`` is the publisher's ``Nats-Msg-Id`` (the stream sequence without one);
``attempt`` is JetStream's delivery count. nats-py decodes header values itself, writing U+FFFD
for bytes that are not UTF-8: such a value is left out (``headers.unreplaced_headers``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from mideng.messaging.headers import unreplaced_headers
from mideng.messaging.message import Message

#: The header a dead-lettered copy carries: why it was given up on.
DEAD_LETTER_REASON = "x-dead-letter-reason"
#: The header a dead-lettered copy carries, as a JSON object, the message's headers in whose
#: names nats-py writes none: those that are not HTTP tokens (another client sends them, and
#: nats-py reads them, but refuses to publish them).
DEAD_HEADERS = "x-dead-letter-headers"
#: The header a publisher's own id travels in; the stream sequence stands in without it.
NATS_MSG_ID = "Nats-Msg-Id"
#: A header name nats-py publishes: an HTTP token (RFC 9110, 5.6.2).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def message_of(raw: Any) -> Message:
    metadata = raw.metadata
    headers: Mapping[str, str] = unreplaced_headers(raw.headers or {})
    message_id = headers.get(NATS_MSG_ID) or str(metadata.sequence.stream)
    return Message(raw.data, headers, message_id, metadata.num_delivered, raw)


def dead_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers of a dead-lettered copy: every one nats-py read from the message (not
    ``Message.headers``, which leaves out a value nats-py decoded with replacement characters),
    but not the ``Nats-`` ones its publisher addressed to JetStream. Copied, its
    ``Nats-Msg-Id`` (already in its stream's duplicate window) had the copy dropped as a
    duplicate and answered as published, and an expectation (``Nats-Expected-Last-Sequence``
    ...) that held for the message fails for the copy on every redelivery. The copy's own id
    is derived from the message's, so a message dead-lettered again (its ``term`` lost) is
    not copied twice. Headers whose names nats-py will not publish go in ``DEAD_HEADERS``:
    under their own names they had the copy refused on every try."""
    out = {k: v for k, v in headers.items() if not k.lower().startswith("nats-")}
    if (msg_id := headers.get(NATS_MSG_ID)) is not None:
        out[NATS_MSG_ID] = f"{msg_id}:dead-letter"
    unsendable = {name: out.pop(name) for name in list(out) if not _TOKEN.fullmatch(name)}
    if unsendable:
        out[DEAD_HEADERS] = json.dumps(unsendable)
    return out
