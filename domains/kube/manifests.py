"""Ready-to-apply workload manifests for a domain: a Deployment, a Job and an MPIJob.

Modelled on NVIDIA's examples for its DRA driver: the pods name the domain's
ResourceClaimTemplate in `resourceClaims` (the portal creates it in the namespace, see
`domains.kube.dra`), each container lists that claim in `resources.claims`, and the IMEX
channel reaches the container through DRA: the scheduler allocates each pod's claim to the
`channel` device of the tray it picks, the kubelet calls the node agent's
`NodePrepareResources`, and the CDI device id the agent returns is what the container
runtime adds to the container (`/dev/nvidia-caps-imex-channels/channel<N>`). No pod
annotation is involved: the kubelet copies pod annotations only into the pod sandbox, so a
`cdi.k8s.io/...` pod annotation never reaches a container.

- **Placed domains** (`numNodes` ≥ 1) pin the pods to the placed trays: required node
  affinity on ``kubernetes.io/hostname`` lists the members' hostnames, a node selector
  term names the clique (``nvidia.com/gpu.clique``), and pod anti-affinity on the hostname
  puts one pod on each tray (one IMEX daemon per tray).
- **Domains that follow the workload** (`numNodes: 0`) pin no tray: the pods land where the
  scheduler puts them and the trays join the domain as their claims are prepared. A node
  selector term names the cliques the domain keeps to (fixed when it was requested; its
  claim template selects only their trays too), and anti-affinity on the hostname keeps
  one pod per tray. As many pods as its largest clique holds stay in one NVLink clique
  (required pod affinity on ``nvidia.com/gpu.clique``, as NVIDIA's examples keep them);
  more, for a domain that keeps to several cliques, fill as few of them as the scheduler
  finds (the same affinity, preferred): each clique they land in forms its own IMEX
  ensemble, a pod's channel is its own clique's, and traffic between cliques goes over the
  cluster's other network.

Placed domains have manifests only while they hold trays (Forming, Ready, Degraded): before
placement there are no hostnames to name, after release they would point at trays that
serve someone else. Otherwise `InvalidTransition` is raised.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import yaml
from django.db.models import Count

from domains.computedomains.admission import quota_of
from domains.computedomains.models import ComputeDomain, Phase
from domains.computedomains.selectors import domain_peers
from domains.errors import InvalidInput, InvalidTransition
from domains.inventory.models import Node

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
# A domain that follows its workload has manifests as soon as it is admitted.
FOLLOW_PHASES = (Phase.ADMITTED, *MANIFEST_PHASES)


def workload_manifests(domain: ComputeDomain, *, replicas: int | None = None) -> dict[str, str]:
    """`{"deployment", "job", "mpijob"}` → YAML text.

    Placed domains: one pod per member tray, pinned there (`replicas` is not theirs to set).
    Domains that follow their workload: `replicas` pods, wherever they land in its cliques
    (default and limits: `follow_replicas`).
    Raises InvalidTransition when there is nothing to run on (see the module docstring),
    InvalidInput (field `replicas`) for a number it cannot run.
    """
    if replicas is not None and domain.num_nodes != 0:
        raise InvalidInput(
            f"replicas applies only to a domain that follows its workload (numNodes 0); "
            f"{domain} runs one pod on each of its {domain.num_nodes} placed trays",
            field="replicas",
        )
    ctx = _Context.of(domain, replicas)
    return {
        "deployment": _dump(ctx, _deployment(ctx)),
        "job": _dump(ctx, _job(ctx)),
        "mpijob": _dump(ctx, _mpijob(ctx)),
    }


class _Context:
    """What every manifest needs to know about the domain, read once."""

    def __init__(self, domain: ComputeDomain, hostnames: list[str], clique: str, replicas: int):
        self.domain = domain
        self.name = domain.name
        self.namespace = domain.namespace.name
        self.hostnames = hostnames  # the placed trays; [] when it follows the workload
        self.clique = clique  # the label; `where` says the short name beside it
        self.clique_name = ""
        self.spans = 1  # the cliques a placed domain's trays are in (one IMEX ensemble each)
        self.one_clique = 0  # following: the most pods one of its cliques holds
        self.allowed: list[str] = []  # the labels of the cliques a following domain keeps to
        self.replicas = replicas
        self.gpus = domain.gpus_per_node
        self.follows = domain.num_nodes == 0

    @classmethod
    def of(cls, domain: ComputeDomain, replicas: int | None) -> _Context:
        if domain.num_nodes == 0:
            if domain.phase not in FOLLOW_PHASES:
                raise InvalidTransition(
                    f"{domain} is {domain.phase}: manifests exist while it is live"
                )
            limits = follow_replicas(domain)
            if replicas is not None and not 1 <= replicas <= limits.most:
                raise InvalidInput(
                    f"replicas must be a whole number from 1 to {limits.most}: one pod per "
                    f"tray ({_limit_reason(domain, limits.most)})",
                    field="replicas",
                )
            ctx = cls(domain, [], "", limits.default if replicas is None else replicas)
            ctx.one_clique = limits.one_clique
            kept = sorted(domain.cliques.all(), key=lambda c: c.label)  # fixed when requested
            ctx.allowed = [c.label for c in kept]
            if len(kept) == 1:
                ctx.clique, ctx.clique_name = kept[0].label, kept[0].name
            return ctx
        members = [m for m in domain_peers(domain) if m.active]
        if domain.phase not in MANIFEST_PHASES or not members:
            raise InvalidTransition(
                f"{domain} is {domain.phase}: manifests exist only while it holds trays "
                "(Forming, Ready or Degraded)"
            )
        hostnames = [m.node.hostname for m in members]
        cliques = {m.clique.label: m.clique.name for m in members}
        if len(cliques) > 1:  # one IMEX ensemble per clique: the hostnames pin each pod
            ctx = cls(domain, hostnames, "", len(hostnames))
            ctx.spans = len(cliques)
            return ctx
        ctx = cls(domain, hostnames, members[0].clique.label, len(hostnames))
        ctx.clique_name = members[0].clique.name
        return ctx

    @property
    def labels(self) -> dict[str, str]:
        return {DOMAIN_LABEL: self.name, DOMAIN_UID_LABEL: str(self.domain.uid)}

    def pod_labels(self, role: str) -> dict[str, str]:
        return {**self.labels, "app.kubernetes.io/name": self.name, ROLE_LABEL: role}

    def metadata(self, name: str) -> dict[str, Any]:
        return {"name": name, "namespace": self.namespace, "labels": self.labels}


def parse_replicas(values: list[str]) -> int | None:
    """The `replicas` a user asked for (every value of the query parameter or form field
    of that name); None: not asked."""
    if not values:
        return None
    if len(values) > 1:
        raise InvalidInput("replicas given more than once", field="replicas")
    raw = values[0].strip()
    if not raw.isascii() or not raw.lstrip("-").isdigit():
        raise InvalidInput(
            f"replicas must be a whole number of pods, not {values[0][:20]!r}", field="replicas"
        )
    return int(raw, 10)


class FollowReplicas(NamedTuple):
    """How many pods a domain that follows its workload may run, one per tray."""

    default: int  # the trays it holds now; while it waits for its workload, `one_clique`
    most: int  # a pod on every tray of the cliques it keeps to, within the quota
    one_clique: int  # the most that stay in one NVLink clique (its largest), within `most`


def follow_replicas(domain: ComputeDomain) -> FollowReplicas:
    """The pods a domain that follows its workload may run (`FollowReplicas`).

    Its cliques are those it keeps to (fixed when it was requested); for a domain that
    predates those, the largest clique of all. No more than the namespace's quota lets one
    domain hold.
    """
    kept = list(domain.cliques.values_list("pk", flat=True))
    trays = Node.objects.filter(clique__isnull=False)
    if kept:
        trays = trays.filter(clique_id__in=kept)
    per_clique = [
        row["trays"] for row in trays.order_by().values("clique_id").annotate(trays=Count("id"))
    ] or [1]
    largest = max(per_clique)
    every = sum(per_clique) if len(kept) > 1 else largest
    cap = _quota_cap(domain)
    most = max(1, min(every, cap) if cap is not None else every)
    one_clique = min(largest, most)
    held = domain.members.filter(active=True).count()
    return FollowReplicas(min(held, most) if held else one_clique, most, one_clique)


def _quota_cap(domain: ComputeDomain) -> int | None:
    """The most trays the namespace's quota lets one domain hold (None: no limit)."""
    quota = quota_of(domain.namespace)
    caps = [quota.max_nodes_per_domain, quota.max_nodes]
    if quota.max_gpus is not None and domain.gpus_per_node:
        caps.append(quota.max_gpus // domain.gpus_per_node)
    known = [c for c in caps if c is not None]
    return min(known) if known else None


def _limit_reason(domain: ComputeDomain, most: int) -> str:
    cap = _quota_cap(domain)
    if cap is not None and cap <= most:
        return f"the quota of namespace {domain.namespace.name} allows {cap} trays in one domain"
    kept = list(domain.cliques.all())
    if len(kept) == 1:
        return f"its clique {kept[0].name} has {most} trays"
    if kept:
        return f"its {len(kept)} cliques have {most} trays"
    return f"the largest clique has {most} trays"


def _dump(ctx: _Context, obj: dict[str, Any]) -> str:
    template = ctx.domain.resource_claim_template
    # The clique by both its names: the portal's pages call it by the short one.
    clique = ctx.clique
    if ctx.clique_name:
        clique = f"{ctx.clique_name} ({CLIQUE_LABEL}={ctx.clique})"
    if ctx.follows and ctx.replicas > ctx.one_clique:
        where = (
            f"{ctx.replicas} pod(s), one per tray: more than one NVLink clique holds\n"
            f"# ({ctx.one_clique}), so they fill as few of the domain's cliques as the scheduler\n"
            "# finds; each clique forms its own IMEX ensemble, a pod's channel is its own\n"
            "# clique's, and traffic between cliques goes over the cluster's other network.\n"
            "# The domain follows the workload: each tray joins it when its pod's claim is\n"
            "# prepared (ask for another number of pods with `replicas` on the portal's page\n"
            "# or API)"
        )
    elif ctx.follows:
        one = f"clique {clique}" if ctx.clique else "one NVLink clique"
        where = (
            f"{ctx.replicas} pod(s), one per tray, all in {one}; the domain follows\n"
            "# the workload: each tray joins it when its pod's claim is prepared (ask for\n"
            "# another number of pods with `replicas` on the portal's page or API)"
        )
    elif ctx.spans > 1:
        where = (
            f"{ctx.replicas} pod(s), one per placed tray, over {ctx.spans} NVLink cliques\n"
            "# (one IMEX ensemble each; a pod's channel is its own clique's)"
        )
    else:
        where = f"{ctx.replicas} pod(s), one per placed tray, in clique {clique}"
    header = (
        f"# {obj['kind']} for ComputeDomain {ctx.namespace}/{ctx.name}: {where}.\n"
        f"# Each pod gets the IMEX channel through DRA: its resourceClaims entry names the\n"
        f"# ResourceClaimTemplate {template!r} the portal created in namespace {ctx.namespace}.\n"
    )
    return header + yaml.dump(obj, Dumper=_PlainDumper, sort_keys=False, default_flow_style=False)


class _PlainDumper(yaml.SafeDumper):
    """Writes a value shared by two places twice: anchors (`&id001`) and aliases confuse
    readers and some tools, and people copy these manifests by hand."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _affinity(ctx: _Context, role: str) -> dict[str, Any]:
    """Placed: only the placed trays. Always: one pod per tray, and all pods in one clique
    but for a placed domain over several (its trays' hostnames say where each pod goes)
    and for more pods than one clique of a following domain holds (as few as may be)."""
    same_workload = {"matchLabels": {DOMAIN_UID_LABEL: str(ctx.domain.uid), ROLE_LABEL: role}}
    together = {"labelSelector": same_workload, "topologyKey": CLIQUE_LABEL}
    affinity: dict[str, Any] = {}
    if ctx.follows and ctx.replicas > ctx.one_clique:
        affinity["podAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": together}
            ]
        }
    elif ctx.spans == 1:
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [together]}
    affinity["podAntiAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": same_workload, "topologyKey": HOSTNAME_LABEL}
        ]
    }
    if ctx.hostnames and not ctx.clique:
        expressions = [{"key": HOSTNAME_LABEL, "operator": "In", "values": ctx.hostnames}]
    elif ctx.hostnames:
        expressions = [
            {"key": HOSTNAME_LABEL, "operator": "In", "values": ctx.hostnames},
            {"key": CLIQUE_LABEL, "operator": "In", "values": [ctx.clique]},
        ]
    elif ctx.allowed:  # wherever the scheduler puts them in a clique the domain keeps to
        expressions = [{"key": CLIQUE_LABEL, "operator": "In", "values": ctx.allowed}]
    else:  # a domain from before cliques were chosen: any node in an NVLink clique
        expressions = [{"key": CLIQUE_LABEL, "operator": "Exists"}]
    affinity["nodeAffinity"] = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": expressions}]
        }
    }
    return affinity


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
    return {"metadata": {"labels": ctx.pod_labels(role)}, "spec": spec}


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
