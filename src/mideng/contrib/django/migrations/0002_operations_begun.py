"""Schema version 2: an index of operations by the time they began, on the steps table."""

from django.db import migrations

from mideng.contrib.django.migration import atomic, operation


class Migration(migrations.Migration):
    atomic = atomic(2)
    dependencies = (("mideng", "0001_tables"),)
    operations = (operation(2),)
