"""docs/messaging.md's table of the consumer's options says what IdempotentConsumer takes."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from mideng.messaging import IdempotentConsumer, Message
from mideng.messaging.keys import default_key

DOCS = Path(__file__).resolve().parents[2] / "docs" / "messaging.md"


def documented() -> dict[str, str]:
    text = DOCS.read_text()
    table = text[text.index("The consumer's options and their defaults:") :]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \|", table, re.MULTILINE)
    return {name: default.strip() for name, default in rows}


def test_every_option_and_its_default_is_in_the_table() -> None:
    taken = {
        name: p.default
        for name, p in inspect.signature(IdempotentConsumer.__init__).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    rows = documented()
    assert set(rows) == set(taken)
    for name, default in taken.items():
        if name != "key":
            assert rows[name] == f"`{default!r}`", name


def test_the_default_key_is_the_message_id_then_the_idempotency_key() -> None:
    assert documented()["key"] == "the `message-id` header, else `idempotency-key`"
    both = Message(id="b-1", body=b"", headers={"message-id": "m-1", "idempotency-key": "k-1"})
    assert default_key(both) == "m-1"
    assert default_key(Message(id="b-2", body=b"", headers={"idempotency-key": "k-1"})) == "k-1"
    assert default_key(Message(id="b-3", body=b"", headers={})) is None
