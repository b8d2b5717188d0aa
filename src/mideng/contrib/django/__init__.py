"""mideng as a Django app: ``INSTALLED_APPS = [..., "mideng.contrib.django"]``.

The app (label ``mideng``) reads ``settings.MIDENG`` (``settings``), gives the project one
Guard built from it (``guard()``), models of mideng's tables (``models``), their migrations
(one per schema version, from ``mideng.schema.migrations``), system checks (``checks``) and
the ``mideng_*`` management commands. See docs/django.md.
"""

from __future__ import annotations

from mideng.contrib.django.project import guard

__all__ = ["guard"]
