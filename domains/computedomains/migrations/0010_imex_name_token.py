# Domains requested before this keep "": the IMEX peer names their daemons started with.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('computedomains', '0009_incidents'),
    ]

    operations = [
        migrations.AddField(
            model_name='computedomain',
            name='imex_name_token',
            field=models.CharField(blank=True, default='', max_length=16),
        ),
    ]
