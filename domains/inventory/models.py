"""Fabric inventory: racks, NVLink cliques, compute trays and their GPUs."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class Rack(models.Model):
    """One NVLink rack (a GB200 NVL72 has 18 compute trays and 9 NVLink switch trays)."""

    name = models.CharField(max_length=63, unique=True)
    location = models.CharField(max_length=200, blank=True)
    kind = models.CharField(max_length=40, default="gb200-nvl72")
    compute_slots = models.PositiveSmallIntegerField(default=18)
    switch_slots = models.PositiveSmallIntegerField(default=9)
    position = models.PositiveIntegerField(default=0, help_text="Order on the fabric overview.")

    class Meta:
        ordering = ["position", "name"]

    def __str__(self) -> str:
        return self.name


class Clique(models.Model):
    """An NVLink partition as the GPUs see it: `<cluster_uuid>.<clique_id>`."""

    cluster_uuid = models.CharField(max_length=36)
    clique_id = models.PositiveIntegerField()
    rack = models.ForeignKey(
        Rack, null=True, blank=True, on_delete=models.SET_NULL, related_name="cliques"
    )
    name = models.CharField(max_length=63, blank=True, help_text="Operator's short name.")

    class Meta:
        ordering = ["rack__position", "rack__name", "clique_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster_uuid", "clique_id"], name="clique_unique_uuid_id"
            ),
        ]

    def __str__(self) -> str:
        return self.name or self.label

    @property
    def label(self) -> str:
        """The `nvidia.com/gpu.clique` label value."""
        return f"{self.cluster_uuid}.{self.clique_id}"


class NodeState(models.TextChoices):
    READY = "ready", "Ready"
    CORDONED = "cordoned", "Cordoned"
    DRAINING = "draining", "Draining"
    DOWN = "down", "Down"
    UNKNOWN = "unknown", "Unknown"
    # A tray the inventory did not know joined: never placeable until an operator accepts
    # it into a rack and slot (the fleet's join token is on every tray's disk).
    PENDING = "pending", "Pending acceptance"


class NodeSource(models.TextChoices):
    SEED = "seed", "Seeded"
    AGENT = "agent", "Agent registration"
    KUBERNETES = "kubernetes", "Kubernetes"


class Node(models.Model):
    """A compute tray: one OS instance, one IMEX daemon, a few GPUs."""

    hostname = models.CharField(max_length=253, unique=True)
    management_ip = models.GenericIPAddressField(unique=True, null=True, blank=True)
    rack = models.ForeignKey(
        Rack, null=True, blank=True, on_delete=models.SET_NULL, related_name="nodes"
    )
    slot = models.PositiveSmallIntegerField(null=True, blank=True, help_text="1-based tray slot")
    clique = models.ForeignKey(
        Clique,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="nodes",
        help_text="Empty when the tray has no multi-node NVLink.",
    )
    gpu_count = models.PositiveSmallIntegerField(default=4)
    gpu_product = models.CharField(max_length=100, blank=True)
    driver_version = models.CharField(max_length=40, blank=True)
    imex_version = models.CharField(max_length=40, blank=True)
    channel_major = models.PositiveIntegerField(null=True, blank=True)
    channel_count = models.PositiveIntegerField(default=2048)

    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.UNKNOWN)
    state_reason = models.CharField(max_length=300, blank=True)
    source = models.CharField(max_length=16, choices=NodeSource.choices, default=NodeSource.SEED)
    gone = models.BooleanField(default=False, help_text="Vanished from Kubernetes.")

    # Agent link: the token is stored hashed; the report is the agent's last observation.
    agent_token_hash = models.CharField(max_length=128, blank=True, db_index=True)
    agent_version = models.CharField(max_length=40, blank=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    rejoin_allowed_until = models.DateTimeField(
        null=True,
        blank=True,
        help_text="An operator allowed the next agent join to re-register the tray until then.",
    )
    identity_hold = models.JSONField(
        default=dict,
        blank=True,
        help_text="An identity change (IP, clique, GPUs, rack) the tray or Kubernetes reported "
        "and an operator has not accepted: the old and new values (domains/inventory/identity.py).",
    )
    daemon_state = models.CharField(max_length=32, blank=True)
    agent_report = models.JSONField(default=dict, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["rack__position", "rack__name", "slot", "hostname"]
        constraints = [
            models.UniqueConstraint(
                fields=["rack", "slot"], condition=Q(slot__isnull=False), name="node_unique_slot"
            ),
        ]

    def __str__(self) -> str:
        return self.hostname


class NodeCondition(models.Model):
    """Something the tray's agent found that an operator must fix (e.g. NVML not loadable).

    The agent reports the whole set with the tray's facts; a blocking condition keeps the
    tray out of placement until the agent stops reporting it.
    """

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="conditions")
    type = models.CharField(max_length=64)
    blocking = models.BooleanField(default=True, help_text="Keeps the tray out of placement.")
    message = models.CharField(max_length=2000)
    since = models.DateTimeField(help_text="When the agent first reported it.")

    class Meta:
        ordering = ["node", "-blocking", "type"]
        constraints = [
            models.UniqueConstraint(fields=["node", "type"], name="node_condition_unique_type"),
        ]

    def __str__(self) -> str:
        return f"{self.node.hostname}: {self.type}"


class FabricState(models.TextChoices):
    NOT_SUPPORTED = "NOT_SUPPORTED", "Not supported"
    NOT_STARTED = "NOT_STARTED", "Not started"
    IN_PROGRESS = "IN_PROGRESS", "In progress"
    COMPLETED = "COMPLETED", "Completed"
    FAILED = "FAILED", "Registration failed"


class GpuHealth(models.TextChoices):
    HEALTHY = "healthy", "Healthy"
    DEGRADED = "degraded", "Degraded"
    FAILED = "failed", "Failed"
    UNKNOWN = "unknown", "Unknown"


class Gpu(models.Model):
    """One GPU of a tray, with its NVLink fabric registration state."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=64, unique=True)
    product = models.CharField(max_length=100, blank=True)
    fabric_state = models.CharField(
        max_length=16, choices=FabricState.choices, default=FabricState.COMPLETED
    )
    health = models.CharField(max_length=16, choices=GpuHealth.choices, default=GpuHealth.HEALTHY)
    vbios_version = models.CharField(max_length=40, blank=True)
    # What its agent last read through NVML (agentwire's GpuHealthSample), when, and what
    # the portal made of it (`domains.inventory.gpuhealth`): the XIDs and NVLink errors
    # seen rising (since when, and the last time), and how long it has run hot.
    telemetry = models.JSONField(default=dict, blank=True)
    telemetry_at = models.DateTimeField(null=True, blank=True)
    temperature_c = models.SmallIntegerField(null=True, blank=True)
    xid_since = models.DateTimeField(null=True, blank=True)
    xid_at = models.DateTimeField(null=True, blank=True)
    nvlink_since = models.DateTimeField(null=True, blank=True)
    nvlink_at = models.DateTimeField(null=True, blank=True)
    hot_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node", "index"]
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="gpu_unique_index_per_node"),
        ]

    def __str__(self) -> str:
        return f"{self.node.hostname}/gpu{self.index}"


class PartState(models.TextChoices):
    """Health of a rack part that runs no agent (a switch tray, a power shelf)."""

    OK = "ok", "OK"
    DOWN = "down", "Down"


class SwitchTray(models.Model):
    """One NVLink switch tray of a rack (a GB200 NVL72 has nine, two NVLink switch chips each).

    Every GPU of the rack has 18 NVLink links, two to each switch tray, so every clique of
    the rack runs over every switch tray: losing one costs each GPU a ninth of its NVLink
    bandwidth rather than any tray (see `domains.foresight.blast`).
    """

    rack = models.ForeignKey(Rack, on_delete=models.CASCADE, related_name="switch_trays")
    slot = models.PositiveSmallIntegerField(help_text="1-based switch tray slot")
    name = models.CharField(max_length=80, unique=True)
    state = models.CharField(max_length=8, choices=PartState.choices, default=PartState.OK)
    state_reason = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["rack__position", "rack__name", "slot"]
        constraints = [
            models.UniqueConstraint(fields=["rack", "slot"], name="switch_tray_unique_slot"),
            models.CheckConstraint(condition=Q(slot__gte=1), name="switch_tray_slot_gte_1"),
        ]

    def __str__(self) -> str:
        return self.name


class PowerShelf(models.Model):
    """One power shelf of a rack: PSUs feeding the rack's shared DC busbar.

    NVIDIA's GB200 reference rack has eight shelves of six 5.5 kW PSUs (33 kW each). All
    of them feed one busbar that every compute and switch tray draws from, so a shelf feeds
    no particular tray: losing one lowers the rack's capacity, and only when what is left
    cannot carry the rack's load does any tray go down (see `domains.foresight.blast`).
    """

    rack = models.ForeignKey(Rack, on_delete=models.CASCADE, related_name="power_shelves")
    position = models.PositiveSmallIntegerField(help_text="1-based, top to bottom")
    name = models.CharField(max_length=80, unique=True)
    psu_count = models.PositiveSmallIntegerField(default=6)
    psu_watts = models.PositiveIntegerField(default=5500)
    state = models.CharField(max_length=8, choices=PartState.choices, default=PartState.OK)
    state_reason = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["rack__position", "rack__name", "position"]
        verbose_name_plural = "power shelves"
        constraints = [
            models.UniqueConstraint(
                fields=["rack", "position"], name="power_shelf_unique_position"
            ),
            models.CheckConstraint(condition=Q(position__gte=1), name="power_shelf_position_gte_1"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def capacity_watts(self) -> int:
        return self.psu_count * self.psu_watts


class MaintenanceScope(models.TextChoices):
    TRAYS = "trays", "Trays"
    CLIQUE = "clique", "Clique"
    RACK = "rack", "Rack"


class MaintenanceWindow(models.Model):
    """Operators' planned work on trays, a clique or a rack, with a reason.

    Placement keeps a new domain off the trays when the window starts before the domain's
    lease would end; a lease is not extended into one. The trays are resolved when the
    window is scheduled (`nodes`); `target` keeps what the operator named.
    """

    scope = models.CharField(max_length=8, choices=MaintenanceScope.choices)
    target = models.CharField(max_length=500, help_text="Hostnames, clique label or rack name.")
    reason = models.CharField(max_length=300)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    nodes = models.ManyToManyField(Node, related_name="maintenance_windows")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["starts_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(ends_at__gt=models.F("starts_at")), name="maintenance_ends_after_start"
            ),
        ]
        indexes = [models.Index(fields=["ends_at", "starts_at"], name="maintenance_time")]

    def __str__(self) -> str:
        what = self.get_scope_display().lower()
        return f"maintenance of {what} {self.target} from {self.starts_at:%Y-%m-%d %H:%M}"
