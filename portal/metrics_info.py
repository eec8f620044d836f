"""`*_info` series for `/metrics`: one per live domain, per tray, per GPU and per tray condition.

Counts say how many; these say which, so an alert can name the degraded domain or the tray
that is not ready, and a dashboard can join the portal's view with NVIDIA's DCGM exporter.
Every series has the value 1 and carries its facts as labels, the way kube-state-metrics
does (`kube_pod_info`):

- `portal_domain_info{domain, tenant_namespace, uid, phase}`: live domains only.
- `portal_tray_info{node, rack, slot, clique, state, domain, tenant_namespace, member_state}`:
  `node` is the tray's hostname, which is the Kubernetes Node name and what DCGM labels
  `Hostname`; `domain` is empty for a free tray.
- `portal_gpu_info{UUID, gpu, node, domain, tenant_namespace}`: `UUID` and `gpu` (the index)
  are spelled as DCGM spells them, so
  `DCGM_FI_DEV_GPU_UTIL * on (UUID) group_left (domain, tenant_namespace) portal_gpu_info`
  gives each GPU's utilisation the domain and tenant that hold it.
- `portal_tray_condition{node, type, blocking}`: what the tray's agent reports as keeping it
  from serving, or (not blocking) what an operator should know.

A scrape reads four tables whatever their size (a fixed number of queries); trays that left
Kubernetes (`gone`) are left out.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from domains.computedomains.models import LIVE_PHASES, ComputeDomain, DomainMember
from domains.inventory.models import Gpu, Node, NodeCondition

TRAY_LABELS = [
    "node",
    "rack",
    "slot",
    "clique",
    "state",
    "domain",
    "tenant_namespace",
    "member_state",
]


class InfoCollector(Collector):
    """Which domain each tray and GPU serves, and each live domain's phase."""

    def collect(self) -> Iterator[Metric]:
        domains = {
            pk: (name, ns, str(uid), phase)
            for pk, name, ns, uid, phase in ComputeDomain.objects.filter(phase__in=LIVE_PHASES)
            .order_by("namespace__name", "name")
            .values_list("pk", "name", "namespace__name", "uid", "phase")
        }
        info = GaugeMetricFamily(
            "portal_domain_info",
            "A live ComputeDomain (value 1): its name, tenant namespace, uid and phase.",
            labels=["domain", "tenant_namespace", "uid", "phase"],
        )
        for name, ns, uid, phase in domains.values():
            info.add_metric([name, ns, uid, phase], 1)
        yield info
        # node → (domain name, namespace, member state), through the one active membership
        serving: dict[int, tuple[str, str, str]] = {}
        for node_id, domain_id, state in DomainMember.objects.filter(active=True).values_list(
            "node_id", "domain_id", "state"
        ):
            name, ns, _, _ = domains.get(domain_id, ("", "", "", ""))
            serving[node_id] = (name, ns, state)
        yield from self._trays(serving)

    @staticmethod
    def _trays(serving: dict[int, tuple[str, str, str]]) -> Iterator[Metric]:
        trays = GaugeMetricFamily(
            "portal_tray_info",
            "A tray (value 1): hostname (the Kubernetes Node name, DCGM's Hostname), rack, "
            "slot, clique, state, and the domain it serves with its member state.",
            labels=TRAY_LABELS,
        )
        rows = (
            Node.objects.filter(gone=False)
            .order_by("hostname")
            .values_list(
                "pk",
                "hostname",
                "rack__name",
                "slot",
                "clique__cluster_uuid",
                "clique__clique_id",
                "state",
            )
        )
        for pk, hostname, rack, slot, uuid, clique_id, state in rows:
            clique = f"{uuid}.{clique_id}" if uuid else ""
            domain, ns, member = serving.get(pk, ("", "", ""))
            labels = [hostname, rack or "", str(slot or ""), clique, state, domain, ns, member]
            trays.add_metric(labels, 1)
        yield trays
        gpus = GaugeMetricFamily(
            "portal_gpu_info",
            "A GPU (value 1) by UUID and index as DCGM labels them, its tray, and the domain "
            "and tenant namespace it serves (join: on (UUID) group_left (domain, "
            "tenant_namespace)).",
            labels=["UUID", "gpu", "node", "domain", "tenant_namespace"],
        )
        for uuid, index, node_id, hostname in (
            Gpu.objects.filter(node__gone=False)
            .order_by("node__hostname", "index")
            .values_list("uuid", "index", "node_id", "node__hostname")
        ):
            domain, ns, _ = serving.get(node_id, ("", "", ""))
            gpus.add_metric([uuid, str(index), hostname, domain, ns], 1)
        yield gpus
        conditions = GaugeMetricFamily(
            "portal_tray_condition",
            "A condition a tray's agent reports (value 1); blocking ones keep it out of placement.",
            labels=["node", "type", "blocking"],
        )
        for hostname, kind, blocking in (
            NodeCondition.objects.filter(node__gone=False)
            .order_by("node__hostname", "type")
            .values_list("node__hostname", "type", "blocking")
        ):
            conditions.add_metric([hostname, kind, "true" if blocking else "false"], 1)
        yield conditions
