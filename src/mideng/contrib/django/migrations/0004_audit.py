"""Schema version 4: the audit tables of operators' actions, and indexes by request id."""

from django.db import migrations

from mideng.contrib.django.migration import atomic, operation


class Migration(migrations.Migration):
    atomic = atomic(4)
    dependencies = (("mideng", "0003_unresolved_counted"),)
    operations = (operation(4),)
