"""A domain that follows its workload keeps the set of cliques its constraint allows
(instead of one clique): a domain that kept to one keeps to that one."""

from django.db import migrations, models


def one_clique_to_set(apps, schema_editor):
    ComputeDomain = apps.get_model("computedomains", "ComputeDomain")
    for domain in ComputeDomain.objects.filter(clique__isnull=False).only("pk", "clique_id"):
        domain.cliques.add(domain.clique_id)
    # The rows' deferred checks run now, before the column goes (PostgreSQL refuses to alter
    # a table with pending trigger events).
    schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


def set_to_one_clique(apps, schema_editor):
    ComputeDomain = apps.get_model("computedomains", "ComputeDomain")
    for domain in ComputeDomain.objects.filter(cliques__isnull=False).distinct():
        first = domain.cliques.order_by("pk").first()
        ComputeDomain.objects.filter(pk=domain.pk).update(clique=first)


class Migration(migrations.Migration):
    dependencies = [
        ("inventory", "0008_gpu_health"),
        ("computedomains", "0012_member_index_per_clique_and_span_counts"),
    ]

    operations = [
        migrations.AddField(
            model_name="computedomain",
            name="cliques",
            field=models.ManyToManyField(blank=True, related_name="+", to="inventory.clique"),
        ),
        migrations.RunPython(one_clique_to_set, set_to_one_clique),
        migrations.RemoveField(model_name="computedomain", name="clique"),
    ]
