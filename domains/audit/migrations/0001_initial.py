# The Event model, moved here from `computedomains` with its table (computedomains_event):
# the state gets the model, the database keeps what it has. Its content type (and so its
# permissions and admin history) follows it to this app.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def content_type_to_audit(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label="computedomains", model="event").update(
        app_label="audit"
    )


def content_type_to_computedomains(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    ContentType.objects.filter(app_label="audit", model="event").update(
        app_label="computedomains"
    )


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("computedomains", "0002_move_event_to_audit"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("inventory", "0001_initial"),
        ("tenancy", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name="Event",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("created_at", models.DateTimeField(auto_now_add=True, db_index=True)),
                        ("actor_kind", models.CharField(choices=[("user", "User"), ("agent", "Node agent"), ("controller", "Controller"), ("kubernetes", "Kubernetes"), ("system", "System")], max_length=16)),
                        ("actor_name", models.CharField(max_length=150)),
                        ("verb", models.CharField(help_text="e.g. domain.requested, node.cordoned", max_length=64)),
                        ("object_type", models.CharField(max_length=32)),
                        ("object_id", models.CharField(max_length=64)),
                        ("object_repr", models.CharField(max_length=200)),
                        ("request_id", models.CharField(blank=True, max_length=64)),
                        ("message", models.CharField(blank=True, max_length=500)),
                        ("details", models.JSONField(blank=True, default=dict)),
                        ("actor_user", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+", to=settings.AUTH_USER_MODEL)),
                        ("domain", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="events", to="computedomains.computedomain")),
                        ("namespace", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="events", to="tenancy.namespace")),
                        ("node", models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="events", to="inventory.node")),
                    ],
                    options={
                        "db_table": "computedomains_event",
                        "ordering": ["-created_at", "-id"],
                        "indexes": [
                            models.Index(fields=["namespace", "created_at"], name="event_namespace_time"),
                            models.Index(fields=["domain", "created_at"], name="event_domain_time"),
                            models.Index(fields=["node", "created_at"], name="event_node_time"),
                            models.Index(fields=["verb", "created_at"], name="event_verb_time"),
                        ],
                    },
                ),
            ],
        ),
        migrations.RunPython(content_type_to_audit, content_type_to_computedomains),
    ]
