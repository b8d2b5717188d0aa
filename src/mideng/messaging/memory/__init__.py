"""The in-process broker (``memory://``), in the inner shape every broker package has: the
adapter that feeds a queue's messages to a consumer and carries out its verdicts
(``consume``), a delivery read as a Message and a dead letter's copy (``message``), the
publisher ``open_publisher("memory://…")`` opens (``publish.MemoryPublisher``). The broker
itself, for one process, is ``mideng.messaging.in_process``.
"""

from __future__ import annotations

from mideng.messaging.consumer import UNDECIDED_DELAY, Consumer
from mideng.messaging.in_process import InProcessBroker, named
from mideng.messaging.memory.consume import consume
from mideng.messaging.memory.message import DEAD_LETTER_REASON, message_of

__all__ = [
    "DEAD_LETTER_REASON",
    "UNDECIDED_DELAY",
    "Consumer",
    "InProcessBroker",
    "consume",
    "message_of",
    "named",
]
