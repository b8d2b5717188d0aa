"""Schema version 1: the record, steps and outbox tables."""

from django.db import migrations

from mideng.contrib.django.migration import atomic, models_state, operation


class Migration(migrations.Migration):
    initial = True
    atomic = atomic(1)
    dependencies = ()
    operations = (operation(1), *models_state())
