"""ComputeDomains, their members and the IMEX channel ledger."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q

from domains.inventory.models import Clique, Node
from domains.tenancy.models import Namespace
from domains.validators import validate_dns1123_label


class Phase(models.TextChoices):
    PENDING = "Pending", "Pending"  # created; waiting for admission or approval
    ADMITTED = "Admitted", "Admitted"  # within quota; queued for placement
    FORMING = "Forming", "Forming"  # members assigned, agents configuring IMEX
    READY = "Ready", "Ready"
    DEGRADED = "Degraded", "Degraded"  # was Ready, lost a member
    RELEASING = "Releasing", "Releasing"  # desired state absent, waiting for clean nodes
    RELEASED = "Released", "Released"
    FAILED = "Failed", "Failed"


LIVE_PHASES = (
    Phase.PENDING,
    Phase.ADMITTED,
    Phase.FORMING,
    Phase.READY,
    Phase.DEGRADED,
    Phase.RELEASING,
)
TERMINAL_PHASES = (Phase.RELEASED, Phase.FAILED)

# A tray's last agent report is a JSON blob that only the operator's node page reads. Hot
# queries that load members with their trays defer it (`.defer(NODE_REPORT)`): decoding 18
# of them for every desired-state fetch was a good part of forming an 18-tray domain.
NODE_REPORT = "node__agent_report"


class AllocationMode(models.TextChoices):
    SINGLE = "Single", "Single"
    ALL = "All", "All"


class PlacementConstraint(models.TextChoices):
    ANY = "any", "Any clique"
    CLIQUE = "clique", "A given clique"
    RACK = "rack", "A given rack"


class ApprovalState(models.TextChoices):
    NOT_REQUIRED = "not_required", "Not required"
    PENDING = "pending", "Waiting for approval"
    APPROVED = "approved", "Approved"
    DENIED = "denied", "Denied"


class ReplacePolicy(models.TextChoices):
    """What happens to a placed domain's tray that is lost (down, or its agent silent)."""

    AUTO = "auto", "Automatic: a free tray of its clique takes its place"
    MANUAL = "manual", "Manual: an operator picks the tray, or none"


class DomainSource(models.TextChoices):
    PORTAL = "portal", "Portal"
    API = "api", "API"
    KUBERNETES = "kubernetes", "Kubernetes"


class ComputeDomain(models.Model):
    """Trays sharing IMEX for one workload: one ensemble in each NVLink clique it spans."""

    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    namespace = models.ForeignKey(Namespace, on_delete=models.PROTECT, related_name="domains")
    name = models.CharField(max_length=63, validators=[validate_dns1123_label])
    labels = models.JSONField(default=dict, blank=True)

    # spec: immutable after creation, like NVIDIA's CRD
    num_nodes = models.PositiveSmallIntegerField()
    gpus_per_node = models.PositiveSmallIntegerField(default=4)
    allocation_mode = models.CharField(
        max_length=8, choices=AllocationMode.choices, default=AllocationMode.SINGLE
    )
    resource_claim_template = models.CharField(max_length=253)
    placement_constraint = models.CharField(
        max_length=8, choices=PlacementConstraint.choices, default=PlacementConstraint.ANY
    )
    placement_target = models.CharField(
        max_length=120, blank=True, help_text="Clique label or rack name for the constraint."
    )
    lifetime = models.DurationField(null=True, blank=True)
    replace_policy = models.CharField(
        max_length=8, choices=ReplacePolicy.choices, default=ReplacePolicy.AUTO
    )
    # How many NVLink cliques (or racks, one clique in each) a placed domain asks to span;
    # 0: placement decides (one clique when it fits the largest allowed, else the fewest).
    span_cliques = models.PositiveSmallIntegerField(default=0)
    span_racks = models.PositiveSmallIntegerField(default=0)

    # status
    phase = models.CharField(max_length=12, choices=Phase.choices, default=Phase.PENDING)
    reason = models.CharField(max_length=64, blank=True, help_text="CamelCase, like Kubernetes.")
    message = models.TextField(blank=True)
    generation = models.PositiveIntegerField(
        default=1, help_text="Bumped whenever the desired state of the members changes."
    )
    approval_state = models.CharField(
        max_length=16, choices=ApprovalState.choices, default=ApprovalState.NOT_REQUIRED
    )
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="requested_domains",
    )
    source = models.CharField(
        max_length=16, choices=DomainSource.choices, default=DomainSource.PORTAL
    )
    request_id = models.CharField(max_length=64, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    placed_at = models.DateTimeField(null=True, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    release_requested_at = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    formation_deadline = models.DateTimeField(null=True, blank=True)
    # The NVLink cliques a domain that follows its workload may take trays from, fixed when
    # it is requested: every clique its placement constraint allows (any: every labelled
    # clique; a rack: that rack's; a clique: that one). Its claim template selects only
    # their trays (a template cannot change). Its pods may land in several: each clique's
    # trays form an ensemble of their own. Empty for a placed domain (its members say where
    # it is) and for a following domain from before the set: it takes a tray of any clique.
    cliques = models.ManyToManyField(Clique, blank=True, related_name="+")
    # The token in the IMEX peer names of a domain that follows its workload
    # (`portal-imex-<token>-<i>`), set when it is requested: IMEX takes daemons whose nodes
    # files list the same names for one domain, so no two domains share them. "" for a
    # domain from before names carried one: it keeps the names its daemons started with.
    imex_name_token = models.CharField(max_length=16, blank=True, default="")

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # Names are reusable once a domain has ended, like a deleted Kubernetes object.
            models.UniqueConstraint(
                fields=["namespace", "name"],
                condition=~Q(phase__in=["Released", "Failed"]),
                name="domain_unique_live_name_per_namespace",
            ),
            models.CheckConstraint(
                condition=Q(name__regex=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"),
                name="domain_name_dns1123",
            ),
            # 0: the domain follows its workload (trays join as its claims are prepared).
            models.CheckConstraint(condition=Q(num_nodes__gte=0), name="domain_num_nodes_gte_0"),
        ]
        indexes = [
            models.Index(fields=["phase", "created_at"], name="domain_phase_created"),
            models.Index(fields=["namespace", "phase"], name="domain_namespace_phase"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace.name}/{self.name}"

    @property
    def is_live(self) -> bool:
        return self.phase in LIVE_PHASES

    @property
    def gpu_count(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def follows_workload(self) -> bool:
        """`numNodes: 0`: nothing reserved; trays join as the workload's claims arrive."""
        return self.num_nodes == 0

    @property
    def trays_held(self) -> int:
        """How many trays the domain holds now (one query; for a domain's own page)."""
        return self.members.filter(active=True).count()


class MemberState(models.TextChoices):
    ASSIGNED = "assigned", "Assigned"
    CONFIGURING = "configuring", "Configuring"
    WAITING_PEERS = "waiting_peers", "Waiting for peers"
    READY = "ready", "Ready"
    # Its agent stopped reporting: not known to be ready, not known to have failed either
    # (its IMEX daemon outlives the agent and may serve on).
    SILENT = "silent", "Agent silent"
    RELEASING = "releasing", "Releasing"
    RELEASED = "released", "Released"
    FAILED = "failed", "Failed"


class DomainMember(models.Model):
    """One tray of a domain; `index` is its line in the IMEX nodes file of every member of
    its clique (a domain over several cliques runs one IMEX ensemble per clique)."""

    domain = models.ForeignKey(ComputeDomain, on_delete=models.CASCADE, related_name="members")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="memberships")
    index = models.PositiveSmallIntegerField()
    clique = models.ForeignKey(Clique, on_delete=models.PROTECT, related_name="+")
    ip_address = models.GenericIPAddressField()
    state = models.CharField(
        max_length=16, choices=MemberState.choices, default=MemberState.ASSIGNED
    )
    # True while this membership holds the node (until the agent confirmed a clean node).
    active = models.BooleanField(default=True)
    message = models.TextField(blank=True, help_text="The agent's last message.")
    step = models.CharField(max_length=64, blank=True, help_text="The agent's current step.")
    daemon_state = models.CharField(max_length=32, blank=True)
    connections = models.JSONField(default=dict, blank=True, help_text="peer index → status")
    generation_applied = models.PositiveIntegerField(default=0)
    state_changed_at = models.DateTimeField(auto_now_add=True)
    assigned_at = models.DateTimeField(auto_now_add=True)
    configuring_at = models.DateTimeField(null=True, blank=True)
    waiting_peers_at = models.DateTimeField(null=True, blank=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["domain", "clique", "index"]
        constraints = [
            # The invariant NVIDIA's daemon enforces with NV_ERR_IN_USE: one domain per tray.
            models.UniqueConstraint(
                fields=["node"], condition=Q(active=True), name="member_one_live_domain_per_node"
            ),
            # Among the members that hold their trays, per clique (each clique of a domain is
            # its own IMEX ensemble, indexes counted inside it, as NVIDIA's driver does): a
            # domain that follows its workload gives a leaving tray's index to the next one
            # that joins (its name in the nodes file is stable), and a tray may leave and
            # join again.
            models.UniqueConstraint(
                fields=["domain", "clique", "index"],
                condition=Q(active=True),
                name="member_unique_index_per_clique",
            ),
            models.UniqueConstraint(
                fields=["domain", "node"], condition=Q(active=True), name="member_unique_node"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.domain} #{self.index} {self.node}"


class ChannelAllocation(models.Model):
    """The IMEX channel ledger: a channel number is held by one domain per clique at a time.

    `Single` domains hold one row. `All` domains get every channel of their member nodes;
    that is safe without rows because a node is in at most one live domain.
    """

    clique = models.ForeignKey(Clique, on_delete=models.PROTECT, related_name="channels")
    channel = models.PositiveIntegerField()
    domain = models.ForeignKey(ComputeDomain, on_delete=models.CASCADE, related_name="channels")
    allocated_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["clique", "channel"]
        constraints = [
            models.UniqueConstraint(
                fields=["clique", "channel"],
                condition=Q(released_at__isnull=True),
                name="channel_once_per_clique",
            ),
            # Channel 0 is reserved (NVreg_CreateImexChannel0 makes it world-usable).
            models.CheckConstraint(condition=Q(channel__gte=1), name="channel_not_zero"),
        ]

    def __str__(self) -> str:
        return f"channel {self.channel} in {self.clique} → {self.domain}"


class DomainClaim(models.Model):
    """A DRA ResourceClaim of the domain, prepared on one of its trays (Kubernetes).

    The node agent records each claim it prepares (`claim_admit`) and lets go of it when it
    unprepares it (`claim_release`); for a domain that follows its workload, a tray's first
    claim makes it a member and its last one takes it out.
    """

    domain = models.ForeignKey(ComputeDomain, on_delete=models.CASCADE, related_name="claims")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="+")
    claim_uid = models.UUIDField()
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    prepared_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(null=True, blank=True)
    # Set when the portal let go of the claim itself (its tray was dropped from the domain):
    # what every later prepare of this claim is answered with.
    refusal = models.TextField(blank=True)

    class Meta:
        ordering = ["domain", "prepared_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["claim_uid"],
                condition=Q(released_at__isnull=True),
                name="claim_prepared_once",
            ),
        ]
        indexes = [models.Index(fields=["domain", "node"], name="claim_domain_node")]

    def __str__(self) -> str:
        return f"ResourceClaim {self.namespace}/{self.name} on {self.node}"


class Tally(models.Model):
    """One bucket of a lifecycle histogram, or a counter, kept at the transitions
    (`computedomains.tallies`), so that /metrics reads a fixed number of rows."""

    series = models.CharField(max_length=64)
    label = models.CharField(max_length=200, blank=True)  # e.g. the step, or a namespace id
    le = models.FloatField()  # the bucket's upper bound; +Inf for a counter or the total
    count = models.BigIntegerField(default=0)
    total = models.FloatField(default=0.0)  # sum of the values counted (read on +Inf only)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["series", "label", "le"], name="tally_one_row_each")
        ]

    def __str__(self) -> str:
        return f"{self.series}{{{self.label}}} le={self.le}: {self.count}"


class Incident(models.Model):
    """One episode of a tray being down: from its mark-down (by an operator, or by the
    Kubernetes sync when its Node vanished) until it is marked up, with the domains that
    had it then. Operators' notes to the affected tenants are events (`incidents`)."""

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="incidents")
    started_at = models.DateTimeField(db_index=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    opened_by = models.CharField(max_length=150)  # the actor who marked it down
    reason = models.CharField(max_length=300, blank=True)
    domains = models.ManyToManyField(ComputeDomain, related_name="incidents", blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["node"],
                condition=Q(ended_at__isnull=True),
                name="one_open_incident_per_tray",
            ),
        ]

    def __str__(self) -> str:
        return f"incident {self.pk}: {self.node} down since {self.started_at:%Y-%m-%d %H:%M} UTC"

    @property
    def is_open(self) -> bool:
        return self.ended_at is None
