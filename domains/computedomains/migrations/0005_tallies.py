# The lifecycle's figures for /metrics, counted at the transitions from now on
# (domains/computedomains/tallies.py), and counted once here from the history so far, the
# way /metrics computed them at every scrape until now.

import math
from collections import defaultdict

from django.db import migrations, models

INF = math.inf
DURATION_BUCKETS = (0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 120, 300, 600)
STEP_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 120, 300, 600)


def _seconds(start, end):
    return max(0.0, (end - start).total_seconds())


def _histogram_rows(Tally, series, label, bounds, values):
    values = sorted(values)
    rows = [
        Tally(series=series, label=label, le=b, count=sum(1 for v in values if v <= b))
        for b in bounds
    ]
    rows.append(Tally(series=series, label=label, le=INF, count=len(values), total=sum(values)))
    return rows


def count_history(apps, schema_editor):
    ComputeDomain = apps.get_model("computedomains", "ComputeDomain")
    Event = apps.get_model("audit", "Event")
    Tally = apps.get_model("computedomains", "Tally")
    domains = ComputeDomain.objects.order_by()

    def durations(start, end):
        rows = domains.filter(**{f"{start}__isnull": False, f"{end}__isnull": False})
        return [_seconds(a, b) for a, b in rows.values_list(start, end).iterator()]

    rows = _histogram_rows(Tally, "formation_seconds", "", DURATION_BUCKETS, durations("created_at", "ready_at"))
    rows += _histogram_rows(Tally, "release_seconds", "", DURATION_BUCKETS, durations("release_requested_at", "released_at"))
    rows += _histogram_rows(Tally, "formation_step_seconds", "admitted", STEP_BUCKETS, durations("created_at", "admitted_at"))
    rows += _histogram_rows(Tally, "formation_step_seconds", "placed", STEP_BUCKETS, durations("admitted_at", "placed_at"))
    # Each member tray's last ready event up to its domain's Ready, as /metrics read them.
    last_ready = {}
    formed = {}
    events = Event.objects.filter(
        verb="member.ready",
        node__isnull=False,
        domain__placed_at__isnull=False,
        domain__ready_at__isnull=False,
    ).values_list("domain_id", "node_id", "created_at", "domain__placed_at", "domain__ready_at")
    for domain_id, node_id, at, placed_at, ready_at in events.order_by().iterator():
        if at > ready_at:
            continue
        key = (domain_id, node_id)
        last_ready[key] = max(at, last_ready.get(key, at))
        formed[domain_id] = (placed_at, ready_at)
    tray_ready = [_seconds(formed[d][0], at) for (d, _), at in last_ready.items()]
    last_of_domain = defaultdict(lambda: None)
    for (d, _), at in last_ready.items():
        last_of_domain[d] = at if last_of_domain[d] is None else max(at, last_of_domain[d])
    ready = [_seconds(at, formed[d][1]) for d, at in last_of_domain.items()]
    rows += _histogram_rows(Tally, "formation_step_seconds", "tray_ready", STEP_BUCKETS, tray_ready)
    rows += _histogram_rows(Tally, "formation_step_seconds", "ready", STEP_BUCKETS, ready)
    ended = domains.filter(phase__in=["Released", "Failed"]).values("namespace_id", "phase")
    for row in ended.annotate(n=models.Count("id")):
        label = f"{row['namespace_id']}:{row['phase']}"
        rows.append(Tally(series="domains_ended", label=label, le=INF, count=row["n"]))
    failed = domains.filter(phase="Failed").exclude(reason="Denied").values("namespace_id")
    for row in failed.annotate(n=models.Count("id")):
        rows.append(Tally(series="domains_failed", label=str(row["namespace_id"]), le=INF, count=row["n"]))
    Tally.objects.bulk_create(rows, batch_size=500)


class Migration(migrations.Migration):

    dependencies = [
        ('audit', '0001_initial'),
        ('computedomains', '0004_claims_and_follow_the_workload'),
    ]

    operations = [
        migrations.CreateModel(
            name='Tally',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('series', models.CharField(max_length=64)),
                ('label', models.CharField(blank=True, max_length=200)),
                ('le', models.FloatField()),
                ('count', models.BigIntegerField(default=0)),
                ('total', models.FloatField(default=0.0)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('series', 'label', 'le'), name='tally_one_row_each')],
            },
        ),
        migrations.RunPython(count_history, migrations.RunPython.noop),
    ]
