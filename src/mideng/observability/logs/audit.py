"""The audit line of an operator's action: one line per thing an action changed, written on
the ``mideng.audit`` logger (route it to an append-only sink: a file, syslog, a log
pipeline). Who, when (the record's own time, and ``mideng_at`` in epoch seconds), what, and
the state before and after, as fields of the record and in the text."""

from __future__ import annotations

import logging
import time

from mideng.observability.logs.fields import contained, fields

audit_log = logging.getLogger("mideng.audit")


@contained
def operator_action(who: str, action: str, target: str, before: str, after: str) -> None:
    """``who`` did ``action`` to ``target``: it was ``before``, it is ``after``."""
    extra = {
        **fields(outcome=action),
        "mideng_operator": who,
        "mideng_action": action,
        "mideng_target": target,
        "mideng_before": before,
        "mideng_after": after,
        "mideng_at": time.time(),
    }
    # WARNING: an action that changed what callers see is shown by logging's defaults.
    audit_log.warning(
        "mideng audit: %s %s %s: %s -> %s", who, action, target, before, after, extra=extra
    )
