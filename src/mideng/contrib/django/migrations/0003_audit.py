"""Schema version 3: the audit tables of operators' actions; indexes by request id, and
SQLite's by lease."""

from django.db import migrations

from mideng.contrib.django.migration import atomic, operation


class Migration(migrations.Migration):
    atomic = atomic(3)
    dependencies = (("mideng", "0002_operations_begun"),)
    operations = (operation(3),)
