# The Event model moved to the `audit` app (domains/audit), keeping its table: this only
# takes it out of this app's migration state; no row and no column changes.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("computedomains", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="Event")],
            database_operations=[],
        ),
    ]
