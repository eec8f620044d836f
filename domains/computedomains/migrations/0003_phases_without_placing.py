# Placing is gone from the phases: a placement is one transaction (Admitted → Forming), so no
# row was ever Placing. Choices only: no SQL runs (sqlmigrate prints a no-op).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('computedomains', '0002_move_event_to_audit'),
    ]

    operations = [
        migrations.AlterField(
            model_name='computedomain',
            name='phase',
            field=models.CharField(choices=[('Pending', 'Pending'), ('Admitted', 'Admitted'), ('Forming', 'Forming'), ('Ready', 'Ready'), ('Degraded', 'Degraded'), ('Releasing', 'Releasing'), ('Released', 'Released'), ('Failed', 'Failed')], default='Pending', max_length=12),
        ),
    ]
