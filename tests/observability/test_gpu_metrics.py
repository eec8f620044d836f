"""The GPUs' health in /metrics, under DCGM's names and labels, and promtool still content."""

from __future__ import annotations

import subprocess

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)

from domains.agents.gpuhealth import gpu_health_record
from domains.inventory.models import Node, NodeState
from tests.observability.exposition import PROMTOOL, families, needs_promtool, scrape, value

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(operator) -> Client:
    client = Client()
    client.force_login(operator)
    return client


def report_health(node: Node, **sick: object) -> None:
    samples = []
    for gpu in node.gpus.order_by("index"):
        doc = {
            "index": gpu.index,
            "uuid": gpu.uuid,
            "temperature_c": 44,
            "power_mw": 612_500,
            "xid_count": 0,
            "last_xid": 0,
            "nvlink_crc_flit_errors": 0,
            "nvlink_crc_data_errors": 0,
            "nvlink_replay_errors": None,  # NVML gave none: no sample
            "nvlink_recovery_errors": 0,
            "ecc_corrected": 2,
            "ecc_uncorrected": 0,
        }
        samples.append(doc | (sick if gpu.index == 1 else {}))
    gpu_health_record(node_id=node.pk, samples=samples)  # type: ignore[arg-type]


def test_gpu_readings_are_served_under_dcgms_names_and_labels(staff, topology):
    node = Node.objects.order_by("slot").first()
    report_health(node)
    report_health(node, xid_count=1, last_xid=79, nvlink_crc_flit_errors=640, temperature_c=93)
    found = families(scrape(staff))
    gpu = node.gpus.get(index=1)
    labels = {"gpu": "1", "UUID": gpu.uuid, "Hostname": node.hostname}
    assert value(found, "DCGM_FI_DEV_GPU_TEMP", **labels) == 93
    assert value(found, "DCGM_FI_DEV_POWER_USAGE", **labels) == 612.5
    assert value(found, "DCGM_FI_DEV_XID_ERRORS", **labels) == 79
    assert value(found, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", **labels) == 640
    assert value(found, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", **labels) == 2
    assert not [
        s for s in found["DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"].samples
    ]  # null is no sample, never 0
    kinds = {s.labels["kind"] for s in found["portal_gpu_alert"].samples if s.labels["gpu"] == "1"}
    assert kinds == {"xid", "nvlink", "hot"}
    healthy = {"gpu": "0", "UUID": node.gpus.get(index=0).uuid, "Hostname": node.hostname}
    assert value(found, "DCGM_FI_DEV_XID_ERRORS", **healthy) == 0


def test_a_down_trays_last_readings_are_left_out(staff, topology):
    node = Node.objects.order_by("slot").first()
    report_health(node)
    Node.objects.filter(pk=node.pk).update(state=NodeState.DOWN)
    found = families(scrape(staff))
    assert found["DCGM_FI_DEV_GPU_TEMP"].samples == []


def test_gpu_metrics_cost_one_query_however_many_gpus(staff, topology):
    for node in Node.objects.order_by("slot")[:2]:
        report_health(node)
    with CaptureQueriesContext(connection) as few:
        scrape(staff)
    for node in Node.objects.order_by("slot")[2:]:
        report_health(node)
    with CaptureQueriesContext(connection) as many:
        scrape(staff)
    assert len(many) == len(few)


def test_openmetrics_takes_the_gpu_families(staff, topology):
    report_health(Node.objects.order_by("slot").first(), xid_count=1, last_xid=13)
    response = staff.get("/metrics", HTTP_ACCEPT="application/openmetrics-text;version=1.0.0")
    names = {f.name for f in openmetrics_families(response.content.decode())}
    assert {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "portal_gpu_alert"} <= names


@needs_promtool
def test_promtool_check_metrics_reports_nothing_with_gpu_readings(staff, topology):
    report_health(Node.objects.order_by("slot").first(), xid_count=1, last_xid=79)
    result = subprocess.run(
        [PROMTOOL, "check", "metrics"],
        input=scrape(staff),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
