"""mideng's tables as Django models, for the ORM and the admin: the same tables and columns
as ``mideng.schema`` makes (``managed = False``: Django never alters them; the app's
migrations create them with mideng's own statements). The operators' actions are custom
permissions on them (``mideng.resolve_record``, ``mideng.release_record``,
``mideng.reconcile_operation``, ``mideng.requeue_outbox``), which Django creates after
``migrate`` as for any model of a migrated app, unmanaged too; the first migration takes the
models' state, permissions included, from the models themselves. Table names are the setting's
(``records``, ``outbox``). Reading them is safe; write through mideng (``guard()``, the
outbox), whose statements keep the fences and per-key order these rows carry.
"""

from __future__ import annotations

from django.db import models

from mideng.contrib.django.settings import config
from mideng.schema.tables import audit_table, keys_table, steps_table
from mideng.schema.versions import VERSION_TABLE

_names = config()


class RecordColumns(models.Model):
    """The record table's columns but its key (``Record``'s and ``RecordListing``'s)."""

    status: models.TextField[str, str] = models.TextField()
    fence: models.BigIntegerField[int, int] = models.BigIntegerField()
    owner: models.TextField[str, str] = models.TextField()
    fingerprint: models.TextField[str | None, str | None] = models.TextField(null=True)
    lease_until: models.FloatField[float | None, float | None] = models.FloatField(null=True)
    result: models.BinaryField[bytes | memoryview | None, bytes | None] = models.BinaryField(
        null=True
    )
    codec: models.TextField[str | None, str | None] = models.TextField(null=True)
    error: models.BinaryField[bytes | memoryview | None, bytes | None] = models.BinaryField(
        null=True
    )
    attempts: models.IntegerField[int, int] = models.IntegerField(default=1)
    request_id: models.TextField[str | None, str | None] = models.TextField(null=True)
    created_at: models.FloatField[float, float] = models.FloatField()
    updated_at: models.FloatField[float, float] = models.FloatField()
    expires_at: models.FloatField[float | None, float | None] = models.FloatField(null=True)

    class Meta:
        abstract = True


class Record(RecordColumns):
    """One record: a business operation's claim and, once done, its result."""

    pk = models.CompositePrimaryKey("scope", "key")
    scope: models.TextField[str, str] = models.TextField()
    key: models.TextField[str, str] = models.TextField()

    class Meta:
        managed = False
        db_table = _names.records


class StepColumns(models.Model):
    """The steps table's columns but its key's first (``Step``'s and ``StepListing``'s)."""

    key: models.TextField[str, str] = models.TextField()
    step: models.TextField[str, str] = models.TextField()
    result: models.BinaryField[bytes | memoryview | None, bytes | None] = models.BinaryField(
        null=True
    )
    codec: models.TextField[str | None, str | None] = models.TextField(null=True)
    at: models.FloatField[float, float] = models.FloatField()

    class Meta:
        abstract = True


class Step(StepColumns):
    """A step of a multi-step operation, its result kept (``step`` "" marks the operation)."""

    pk = models.CompositePrimaryKey("scope", "key", "step")
    scope: models.TextField[str, str] = models.TextField()

    class Meta:
        managed = False
        db_table = steps_table(_names.records)


class OutboxMessage(models.Model):
    """A message written in a business transaction, published by the relay after commit
    (``state``: 0 pending, 1 sent, 2 dead)."""

    id: models.CharField[str, str] = models.CharField(max_length=36, primary_key=True)
    aggregatetype: models.CharField[str, str] = models.CharField(max_length=255)
    aggregateid: models.CharField[str | None, str | None] = models.CharField(
        max_length=255, null=True
    )
    type: models.CharField[str, str] = models.CharField(max_length=255)
    payload: models.BinaryField[bytes | memoryview, bytes] = models.BinaryField()
    destination: models.CharField[str, str] = models.CharField(max_length=255)
    headers: models.TextField[str, str] = models.TextField()
    request_id: models.CharField[str | None, str | None] = models.CharField(
        max_length=255, null=True
    )
    seq: models.BigIntegerField[int | None, int | None] = models.BigIntegerField(null=True)
    created_at: models.FloatField[float, float] = models.FloatField()
    state: models.SmallIntegerField[int, int] = models.SmallIntegerField(default=0)
    attempts: models.IntegerField[int, int] = models.IntegerField(default=0)
    last_error: models.TextField[str | None, str | None] = models.TextField(null=True)
    sent_at: models.FloatField[float | None, float | None] = models.FloatField(null=True)
    claimed_by: models.CharField[str | None, str | None] = models.CharField(
        max_length=36, null=True
    )
    claimed_until: models.FloatField[float | None, float | None] = models.FloatField(null=True)

    class Meta:
        managed = False
        db_table = _names.outbox
        permissions = (("requeue_outbox", "Can requeue dead outbox rows"),)


class OutboxKey(models.Model):
    """An outbox key's sequence: the last written and the last sent, and the relay holding it."""

    aggregateid: models.CharField[str, str] = models.CharField(max_length=255, primary_key=True)
    last_seq: models.BigIntegerField[int, int] = models.BigIntegerField()
    sent_seq: models.BigIntegerField[int, int] = models.BigIntegerField(default=0)
    pending: models.SmallIntegerField[int, int] = models.SmallIntegerField(default=1)
    claimed_by: models.CharField[str | None, str | None] = models.CharField(
        max_length=36, null=True
    )
    claimed_until: models.FloatField[float | None, float | None] = models.FloatField(null=True)

    class Meta:
        managed = False
        db_table = keys_table(_names.outbox)


class RecordListing(RecordColumns):
    """The record table as the admin lists it. Django's admin takes no model whose primary
    key is composite, as ``Record``'s is; this one names ``scope`` its key, which it is not
    (one scope holds many keys): the admin names each row by its scope and key itself, and
    nothing else should use this model (use ``Record``)."""

    scope: models.TextField[str, str] = models.TextField(primary_key=True)
    key: models.TextField[str, str] = models.TextField()

    class Meta:
        managed = False
        db_table = _names.records
        verbose_name = "record"
        permissions = (
            ("resolve_record", "Can resolve a stuck or UNKNOWN record"),
            ("release_record", "Can release a stuck or UNKNOWN record"),
        )


class StepListing(StepColumns):
    """The steps table as the admin lists it: ``step`` "" is an operation (its arguments
    kept), any other a step of one (its result kept). As ``RecordListing``: ``scope`` is
    named its key for the admin's sake only; use ``Step``."""

    scope: models.TextField[str, str] = models.TextField(primary_key=True)

    class Meta:
        managed = False
        db_table = steps_table(_names.records)
        verbose_name = "step"


class OperationListing(StepListing):
    """The operations (the steps table's rows whose ``step`` is ""), for the admin."""

    class Meta:
        proxy = True
        verbose_name = "operation"
        permissions = (("reconcile_operation", "Can run an unfinished operation again"),)


class SchemaVersion(models.Model):
    """A schema version applied to a set of tables (component, main table)."""

    pk = models.CompositePrimaryKey("component", "name", "version")
    component: models.TextField[str, str] = models.TextField()
    name: models.TextField[str, str] = models.TextField()
    version: models.IntegerField[int, int] = models.IntegerField()
    title: models.TextField[str, str] = models.TextField()
    mideng: models.TextField[str, str] = models.TextField()
    applied_at: models.FloatField[float, float] = models.FloatField()

    class Meta:
        managed = False
        db_table = VERSION_TABLE


class AuditColumns(models.Model):
    """An operator's action, as ``mideng.schema.audit`` keeps it: rows are only ever added."""

    id: models.BigAutoField[int, int] = models.BigAutoField(primary_key=True)
    at: models.FloatField[float, float] = models.FloatField()
    operator: models.TextField[str, str] = models.TextField()
    action: models.TextField[str, str] = models.TextField()
    target: models.TextField[str, str] = models.TextField()
    state_before: models.TextField[str, str] = models.TextField()
    state_after: models.TextField[str, str] = models.TextField()

    class Meta:
        abstract = True


class RecordAudit(AuditColumns):
    """The actions on records and operations (beside the record table)."""

    class Meta:
        managed = False
        db_table = audit_table(_names.records)
        verbose_name = "record action"


class OutboxAudit(AuditColumns):
    """The actions on outbox rows (beside the outbox)."""

    class Meta:
        managed = False
        db_table = audit_table(_names.outbox)
        verbose_name = "outbox action"
