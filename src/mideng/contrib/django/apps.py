"""The app's configuration: label ``mideng``; the setting checked and the checks registered
when Django starts."""

from __future__ import annotations

from django.apps import AppConfig


class MidengConfig(AppConfig):
    name = "mideng.contrib.django"
    label = "mideng"
    verbose_name = "mideng (idempotency)"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from mideng.contrib.django import checks
        from mideng.contrib.django.settings import config

        config()  # a wrong key or type stops the start, naming it
        checks.register()
