"""Guarded calls: the Guard and its drivers, the decorator, the default Guard, heartbeats.

``Guard`` runs a body at most once per (scope, key) with its sync (``run``) and async
(``arun``) drivers; ``Driver`` is the protocol the decorator, transactional mode, the HTTP
exchange and the message consumers call it through.
"""

from mideng.guard.default import configure, default_guard, idempotent
from mideng.guard.driver import Driver
from mideng.guard.guard import Guard

__all__ = ["Driver", "Guard", "configure", "default_guard", "idempotent"]
