"""What each of the app's migrations is: ``mideng.schema.django``'s operation for one schema
version, on the tables and the database ``settings.MIDENG`` names. A new schema version is a
new file in ``migrations/`` of three lines naming its number (a test fails while one is
missing)."""

from __future__ import annotations

from typing import Any

from mideng.contrib.django.settings import config
from mideng.schema import django as mideng_schema


def operation(version: int) -> Any:
    """Migration ``version`` of mideng's schema, run on the ``database`` alias only."""
    names = config()
    return mideng_schema.operation(
        version, tables=[names.records], outboxes=[names.outbox], using=names.database
    )


def atomic(version: int) -> bool:
    return mideng_schema.atomic(version)


def models_state() -> list[Any]:
    """The models' state for Django's migration graph: the app's models as they are (no
    table of theirs is made by it: they are ``managed = False``; version 1's operation
    made the tables). Taken from the models, not copied into the migration, since Django
    alters nothing of an unmanaged model and a copy could only drift."""
    from django.db import migrations
    from django.db.migrations.state import ModelState

    from mideng.contrib.django import models

    kept = (models.Record, models.Step, models.OutboxMessage, models.OutboxKey)
    audits = (models.RecordAudit, models.OutboxAudit)
    listed = (models.RecordListing, models.StepListing, models.OperationListing)
    states = [
        ModelState.from_model(model) for model in (*kept, models.SchemaVersion, *listed, *audits)
    ]
    return [
        migrations.CreateModel(
            state.name, list(state.fields.items()), options=state.options, bases=state.bases
        )
        for state in states
    ]
