"""Ready-to-apply workload manifests for a placed domain: a Deployment, a Job and an MPIJob.

Modelled on NVIDIA's examples for its DRA driver (a ComputeDomain whose ResourceClaimTemplate
the workload's pods name in `resourceClaims`), with three differences that make them fit
what the portal placed:

- **The IMEX channel comes through CDI.** The node agent writes a CDI spec on each member
  tray (`/etc/cdi/nvidia.com-imex-channel.json`) of kind ``nvidia.com/imex-channel`` with one
  device per channel named ``channel<N>`` (allocation mode ``Single``) or one device named
  ``all`` holding every channel (mode ``All``). Pods ask for it with the CDI pod annotation
  ``cdi.k8s.io/imex-channel: nvidia.com/imex-channel=channel<N>`` (or ``=all``); a CDI-enabled
  container runtime (containerd ≥ 1.7 with ``enable_cdi``, CRI-O ≥ 1.23) then creates
  ``/dev/nvidia-caps-imex-channels/channel<N>`` in the container. The device name is the
  contract with ``nodeagent.channels.cdi_spec``.
- **Pinned to the placed trays.** Required node affinity on ``kubernetes.io/hostname`` lists
  the members' hostnames, a node selector names the clique (``nvidia.com/gpu.clique``), pod
  affinity on ``nvidia.com/gpu.clique`` keeps every pod in one NVLink clique, and pod
  anti-affinity on the hostname puts one pod on each tray (one IMEX daemon per tray).
- **The ResourceClaimTemplate reference is kept** (``resourceClaims`` naming the domain's
  ``resource_claim_template``), exactly like NVIDIA's examples, so a workload written for
  NVIDIA's DRA driver reads the same. It only schedules where a ResourceClaimTemplate of that
  name exists in the namespace; the header comment of every manifest says so.

Manifests exist only while the domain holds trays (Forming, Ready, Degraded):
before placement there are no hostnames or channel to name, after release they would
point at trays that serve someone else. Otherwise `InvalidTransition` is raised.
"""

from __future__ import annotations

from typing import Any

import yaml

from domains.computedomains.models import AllocationMode, ComputeDomain, Phase
from domains.computedomains.selectors import domain_channels, domain_peers
from domains.errors import InvalidTransition

CDI_KIND = "nvidia.com/imex-channel"
CDI_ANNOTATION = "cdi.k8s.io/imex-channel"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
HOSTNAME_LABEL = "kubernetes.io/hostname"
DOMAIN_LABEL = "portal.domains/domain"
DOMAIN_UID_LABEL = "portal.domains/domain-uid"
ROLE_LABEL = "portal.domains/role"
CLAIM_NAME = "compute-domain-channel"
CHANNELS_PATH = "/dev/nvidia-caps-imex-channels"

# Images of NVIDIA's own examples: a plain shell to look at the channel, and the
# nvbandwidth sample that measures multi-node NVLink bandwidth with MPI.
SHELL_IMAGE = "ubuntu:22.04"
NVBANDWIDTH_IMAGE = "ghcr.io/nvidia/k8s-samples:nvbandwidth-v0.7-8d103163"

MANIFEST_PHASES = (Phase.FORMING, Phase.READY, Phase.DEGRADED)


def workload_manifests(domain: ComputeDomain) -> dict[str, str]:
    """`{"deployment", "job", "mpijob"}` → YAML text, each pinned to the domain's trays.

    Raises InvalidTransition when the domain holds no trays (see the module docstring).
    """
    ctx = _Context.of(domain)
    return {
        "deployment": _dump(ctx, _deployment(ctx)),
        "job": _dump(ctx, _job(ctx)),
        "mpijob": _dump(ctx, _mpijob(ctx)),
    }


class _Context:
    """What every manifest needs to know about the domain, read once."""

    def __init__(self, domain: ComputeDomain, hostnames: list[str], clique: str, device: str):
        self.domain = domain
        self.name = domain.name
        self.namespace = domain.namespace.name
        self.hostnames = hostnames
        self.clique = clique
        self.device = device  # CDI device name: channel<N> or all
        self.replicas = len(hostnames)
        self.gpus = domain.gpus_per_node

    @classmethod
    def of(cls, domain: ComputeDomain) -> _Context:
        members = [m for m in domain_peers(domain) if m.active]
        if domain.phase not in MANIFEST_PHASES or not members:
            raise InvalidTransition(
                f"{domain} is {domain.phase}: manifests exist only while it holds trays "
                "(Forming, Ready or Degraded)"
            )
        if domain.allocation_mode == AllocationMode.ALL:
            device = "all"
        else:
            channels = domain_channels(domain)
            if not channels:
                raise InvalidTransition(f"{domain} has no IMEX channel allocated yet")
            device = f"channel{channels[0]}"
        return cls(domain, [m.node.hostname for m in members], members[0].clique.label, device)

    @property
    def labels(self) -> dict[str, str]:
        return {DOMAIN_LABEL: self.name, DOMAIN_UID_LABEL: str(self.domain.uid)}

    def pod_labels(self, role: str) -> dict[str, str]:
        return {**self.labels, "app.kubernetes.io/name": self.name, ROLE_LABEL: role}

    def metadata(self, name: str) -> dict[str, Any]:
        return {"name": name, "namespace": self.namespace, "labels": self.labels}


def _dump(ctx: _Context, obj: dict[str, Any]) -> str:
    header = (
        f"# {obj['kind']} for ComputeDomain {ctx.namespace}/{ctx.name}: "
        f"{ctx.replicas} pod(s), one per tray, in clique {ctx.clique}.\n"
        f"# The IMEX channel reaches each pod through the CDI annotation {CDI_ANNOTATION}\n"
        f"# ({CDI_KIND}={ctx.device}); the resourceClaims entry follows NVIDIA's examples and\n"
        f"# needs a ResourceClaimTemplate named {ctx.domain.resource_claim_template!r} in\n"
        f"# namespace {ctx.namespace}.\n"
    )
    return header + yaml.safe_dump(obj, sort_keys=False, default_flow_style=False)


def _affinity(ctx: _Context, role: str) -> dict[str, Any]:
    """Only the placed trays; all pods in one clique; one pod per tray."""
    same_workload = {"matchLabels": {DOMAIN_UID_LABEL: str(ctx.domain.uid), ROLE_LABEL: role}}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": HOSTNAME_LABEL, "operator": "In", "values": ctx.hostnames},
                            {"key": CLIQUE_LABEL, "operator": "In", "values": [ctx.clique]},
                        ]
                    }
                ]
            }
        },
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": same_workload, "topologyKey": CLIQUE_LABEL}
            ]
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": same_workload, "topologyKey": HOSTNAME_LABEL}
            ]
        },
    }


def _pod_spec(ctx: _Context, role: str, container: dict[str, Any], **extra: Any) -> dict[str, Any]:
    container = {
        **container,
        "resources": {"limits": {"nvidia.com/gpu": ctx.gpus}, "claims": [{"name": CLAIM_NAME}]},
    }
    return {
        **extra,
        "affinity": _affinity(ctx, role),
        "containers": [container],
        "resourceClaims": [
            {"name": CLAIM_NAME, "resourceClaimTemplateName": ctx.domain.resource_claim_template}
        ],
    }


def _pod_template(ctx: _Context, role: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {
            "labels": ctx.pod_labels(role),
            "annotations": {CDI_ANNOTATION: f"{CDI_KIND}={ctx.device}"},
        },
        "spec": spec,
    }


def _shell(ctx: _Context, script: str) -> dict[str, Any]:
    return {"name": "ctr", "image": SHELL_IMAGE, "command": ["bash", "-c"], "args": [script]}


def _deployment(ctx: _Context) -> dict[str, Any]:
    script = f"ls -la {CHANNELS_PATH}; trap 'exit 0' TERM; sleep infinity & wait"
    spec = _pod_spec(ctx, "worker", _shell(ctx, script))
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": ctx.metadata(ctx.name),
        "spec": {
            "replicas": ctx.replicas,
            "selector": {"matchLabels": {**ctx.labels, ROLE_LABEL: "worker"}},
            # Recreate: a rolling update would want a pod more than there are trays.
            "strategy": {"type": "Recreate"},
            "template": _pod_template(ctx, "worker", spec),
        },
    }


def _job(ctx: _Context) -> dict[str, Any]:
    script = f"ls -la {CHANNELS_PATH} && nvidia-smi -q | grep -A 4 -i fabric"
    spec = _pod_spec(ctx, "job", _shell(ctx, script), restartPolicy="Never")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": ctx.metadata(ctx.name),
        "spec": {
            "completionMode": "Indexed",
            "completions": ctx.replicas,
            "parallelism": ctx.replicas,
            "backoffLimit": 0,
            "template": _pod_template(ctx, "job", spec),
        },
    }


def _mpijob(ctx: _Context) -> dict[str, Any]:
    """NVIDIA's nvbandwidth MPIJob: one worker per tray, `gpus_per_node` ranks each."""
    ranks = ctx.replicas * ctx.gpus
    launcher = {
        "name": "mpi-launcher",
        "image": NVBANDWIDTH_IMAGE,
        "securityContext": {"runAsUser": 1000},
        "command": ["mpirun"],
        "args": [
            *("--bind-to", "core", "--map-by", f"ppr:{ctx.gpus}:node", "-np", str(ranks)),
            *("--report-bindings", "-q", "nvbandwidth", "-t"),
            "multinode_device_to_device_memcpy_read_ce",
        ],
    }
    worker = {
        "name": "mpi-worker",
        "image": NVBANDWIDTH_IMAGE,
        "securityContext": {"runAsUser": 1000},
        "command": ["/usr/sbin/sshd"],
        "args": ["-De", "-f", "/home/mpiuser/.sshd_config"],
    }
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": ctx.metadata(ctx.name),
        "spec": {
            "slotsPerWorker": ctx.gpus,
            "launcherCreationPolicy": "WaitForWorkersReady",
            "runPolicy": {"cleanPodPolicy": "Running"},
            "sshAuthMountPath": "/home/mpiuser/.ssh",
            "mpiReplicaSpecs": {
                # The launcher needs no GPU and no channel; it may run anywhere.
                "Launcher": {
                    "replicas": 1,
                    "template": {
                        "metadata": {"labels": ctx.pod_labels("launcher")},
                        "spec": {"containers": [launcher]},
                    },
                },
                "Worker": {
                    "replicas": ctx.replicas,
                    "template": _pod_template(ctx, "worker", _pod_spec(ctx, "worker", worker)),
                },
            },
        },
    }
