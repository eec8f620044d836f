"""The GPUs' health in a status report: recorded on each GPU, turned into alerts (XIDs,
NVLink errors rising, heat), and left alone by agents that do not send it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agentwire.gpuhealth import GpuHealthSample
from agentwire.messages import status_report
from domains.agents.gpuhealth import gpu_health_record
from domains.agents.joining import agent_join
from domains.inventory.gpuhealth import GpuReading, gpu_readings
from domains.inventory.models import Gpu, Node
from testbed import factories
from testbed.agents import ensure_join_token, node_facts

pytestmark = pytest.mark.django_db


@pytest.fixture
def tray() -> tuple[Node, APIClient]:
    (rack,) = factories.make_racks("3", ip_prefix=factories.tray_ip_prefix(13))
    node = Node.objects.filter(rack=rack).order_by("slot").first()
    assert node is not None
    _, raw = agent_join(join_token=ensure_join_token(), facts=node_facts(node))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {raw}")
    return node, client


def sample(gpu: Gpu, **values: object) -> GpuHealthSample:
    doc = {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "temperature_c": 45,
        "power_mw": 610_000,
        "xid_count": 0,
        "last_xid": 0,
        "nvlink_crc_flit_errors": 0,
        "nvlink_crc_data_errors": 0,
        "nvlink_replay_errors": 0,
        "nvlink_recovery_errors": 0,
        "ecc_corrected": 0,
        "ecc_uncorrected": 0,
    }
    return doc | values  # type: ignore[return-value]


def readings(node: Node) -> list[GpuReading]:
    return gpu_readings(node.gpus.order_by("index"), now=timezone.now())


def test_a_report_with_gpu_health_records_each_gpus_readings(tray):
    node, client = tray
    gpus = list(node.gpus.order_by("index"))
    report = status_report(step="idle", generation_applied=0, clean=True)
    report["gpu_health"] = [sample(g, temperature_c=40 + g.index) for g in gpus]
    resp = client.post(f"/api/v1/agent/nodes/{node.pk}/status/", report, format="json")
    assert resp.status_code == 200, resp.content
    found = readings(node)
    assert [r.gpu.temperature_c for r in found] == [40 + g.index for g in gpus]
    assert found[0].power_w == 610.0 and found[0].nvlink_errors == 0
    assert all(not r.alerts for r in found)
    node.refresh_from_db()
    assert "gpu_health" not in node.agent_report  # kept on the GPUs, not in every report


def test_an_old_agents_report_without_gpu_health_still_works(tray):
    node, client = tray
    report = status_report(step="idle", generation_applied=0, clean=True)
    resp = client.post(f"/api/v1/agent/nodes/{node.pk}/status/", report, format="json")
    assert resp.status_code == 200
    assert not Gpu.objects.filter(node=node, telemetry_at__isnull=False).exists()


def test_a_gpu_health_sample_out_of_range_names_the_field(tray):
    node, client = tray
    gpu = node.gpus.first()
    report = status_report(step="idle", generation_applied=0, clean=True)
    report["gpu_health"] = [sample(gpu, temperature_c=-5)]
    resp = client.post(f"/api/v1/agent/nodes/{node.pk}/status/", report, format="json")
    assert resp.status_code == 400 and "temperature_c" in resp.content.decode()
    assert not Gpu.objects.filter(node=node, telemetry_at__isnull=False).exists()


def test_an_xid_makes_the_gpu_need_attention_since_it_was_seen(tray):
    node, _ = tray
    gpu = node.gpus.order_by("index")[1]
    t0 = timezone.now()
    gpu_health_record(node_id=node.pk, samples=[sample(gpu)], now=t0)
    gpu_health_record(node_id=node.pk, samples=[sample(gpu, xid_count=1, last_xid=79)], now=t0)
    later = t0 + timedelta(minutes=5)
    gpu_health_record(node_id=node.pk, samples=[sample(gpu, xid_count=2, last_xid=48)], now=later)
    (alert,) = gpu_readings([Gpu.objects.get(pk=gpu.pk)], now=later)[0].alerts
    assert (alert.kind, alert.words, alert.since) == ("xid", "XID 48", t0)
    # An hour after the last one it no longer does (PORTAL_GPU_ALERT_S).
    quiet = gpu_readings([Gpu.objects.get(pk=gpu.pk)], now=later + timedelta(hours=1, seconds=1))
    assert quiet[0].alerts == []


def test_nvlink_errors_rising_between_samples_need_attention_a_first_count_does_not(tray):
    node, _ = tray
    gpu = node.gpus.first()
    t0 = timezone.now()
    gpu_health_record(node_id=node.pk, samples=[sample(gpu, nvlink_replay_errors=7)], now=t0)
    assert readings(node)[0].alerts == []  # where counting starts, not a rise
    gpu_health_record(node_id=node.pk, samples=[sample(gpu, nvlink_replay_errors=7)], now=t0)
    assert readings(node)[0].alerts == []
    rising = sample(gpu, nvlink_replay_errors=7, nvlink_crc_flit_errors=300)
    gpu_health_record(node_id=node.pk, samples=[rising], now=t0)
    (alert,) = readings(node)[0].alerts
    assert (alert.kind, alert.words) == ("nvlink", "NVLink errors rising")


def test_a_hot_gpu_needs_attention_while_hot(tray, settings):
    node, _ = tray
    gpu = node.gpus.first()
    gpu_health_record(node_id=node.pk, samples=[sample(gpu, temperature_c=93)])
    (alert,) = readings(node)[0].alerts
    assert (alert.kind, alert.words) == ("hot", "93 °C")
    gpu_health_record(node_id=node.pk, samples=[sample(gpu, temperature_c=60)])
    assert readings(node)[0].alerts == [] and Gpu.objects.get(pk=gpu.pk).hot_since is None


def test_a_sample_naming_another_gpus_uuid_is_not_taken(tray):
    node, _ = tray
    gpu = node.gpus.first()
    gpu_health_record(node_id=node.pk, samples=[sample(gpu, uuid="GPU-not-this-one")])
    assert Gpu.objects.get(pk=gpu.pk).telemetry_at is None
