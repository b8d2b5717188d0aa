"""The operators' web pages: an overview, lists by keyset, lookups and detail pages over a
store, the outbox and the operations; actions when enabled. Server-rendered (Jinja2), no
script, every asset in the package. ``app(store=..., db=...)`` is the ASGI application;
``mideng.dashboard.django`` the Django include; ``mideng dashboard`` serves it (docs/dashboard.md).
"""

from __future__ import annotations

from mideng.dashboard.asgi import DashboardApp, app
from mideng.dashboard.settings import Settings, redact_patterns

__all__ = ["DashboardApp", "Settings", "app", "redact_patterns"]
